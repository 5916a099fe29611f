package correx

import "testing"

func TestHostOverride(t *testing.T) {
	tests := []struct {
		name, dockerHost, override string
		want                       string // "" leaves the variable alone
	}{
		{"local engine, default socket", "", "", "127.0.0.1"},
		{"local engine, unix socket", "unix:///run/user/1000/docker.sock", "", "127.0.0.1"},
		{"remote engine", "tcp://10.0.0.5:2376", "", ""},
		{"ssh engine", "ssh://me@builder", "", ""},
		{"set by the user", "", "192.168.1.9", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"DOCKER_HOST": tt.dockerHost, "TESTCONTAINERS_HOST_OVERRIDE": tt.override}
			if got := hostOverride(func(k string) string { return env[k] }); got != tt.want {
				t.Errorf("hostOverride = %q, want %q", got, tt.want)
			}
		})
	}
}
