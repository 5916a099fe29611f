package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeExamples runs the README's "Command line" block, as written,
// against st: each correx line (joined across backslash continuations,
// without its comment) must exit 0. printf '%s\n' ARGS | correx ... feeds the
// args as lines on standard input; the lines that start a stack or install
// the binary, and those that run until interrupted (watch, top), are left
// out.
func readmeExamples(t *testing.T, env map[string]string) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## Command line\n")
	if ok {
		_, block, ok = strings.Cut(block, "```sh\n")
	}
	if !ok {
		t.Fatal(`README: no "## Command line" shell block`)
	}
	block, _, _ = strings.Cut(block, "```\n")
	block = strings.ReplaceAll(block, "\\\n", " ")
	ran := 0
	for _, line := range strings.Split(block, "\n") {
		words := shellWords(t, line)
		if len(words) == 0 || words[0] == "make" || words[0] == "go" {
			continue
		}
		stdin := ""
		if words[0] == "printf" {
			i := indexOf(words, "|")
			if i < 2 || words[1] != `%s\n` {
				t.Fatalf("README line %q: want printf '%%s\\n' ARGS | correx ...", line)
			}
			stdin = strings.Join(words[2:i], "\n") + "\n"
			words = words[i+1:]
		}
		if words[0] != "correx" {
			t.Fatalf("README line %q: not a correx command", line)
		}
		if words[1] == "watch" || words[1] == "top" {
			continue
		}
		r := runCLI(t, env, stdin, words[1:]...)
		if r.code != ExitOK {
			t.Errorf("README line %q: exit %d\n%s%s", line, r.code, r.stdout, r.stderr)
		}
		ran++
	}
	if ran < 8 {
		t.Errorf("ran %d README lines; the block has more", ran)
	}
}

func indexOf(words []string, w string) int {
	for i, x := range words {
		if x == w {
			return i
		}
	}
	return -1
}

// shellWords splits a line as sh would for the README's examples: single
// and double quotes (no expansions inside), a comment from an unquoted #,
// and | as a word of its own.
func shellWords(t *testing.T, line string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has begun
		quote rune
	)
	for _, c := range line {
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '#' && !in:
			return words
		case c == ' ' || c == '\t' || c == '|':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
			if c == '|' {
				words = append(words, "|")
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("README line %q: unbalanced quote", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
