package query

import (
	"strings"
	"testing"
)

// TestArchiveReadSettingsRefused: each bad archived-read setting is
// refused, naming its variable.
func TestArchiveReadSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		wants string
	}{
		{"no reads", func(c *Config) { c.ArchiveReads = 0 }, "CORREX_ARCHIVE_READS:"},
		{"a share above the whole", func(c *Config) { c.ArchiveReads, c.ArchiveReadsPerPrincipal = 2, 3 }, "CORREX_ARCHIVE_READS_PER_PRINCIPAL"},
		{"no share", func(c *Config) { c.ArchiveReadsPerPrincipal = 0 }, "CORREX_ARCHIVE_READS_PER_PRINCIPAL"},
		{"a negative cache", func(c *Config) { c.ArchiveHeadCache = -1 }, "CORREX_ARCHIVE_HEAD_CACHE"},
	} {
		c := DefaultConfig()
		c.Auth.Disabled = true // what is checked here is the archive's settings
		if err := c.Validate(); err != nil {
			t.Fatalf("the defaults: %v", err)
		}
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: %v, want %q named", tc.name, err, tc.wants)
		}
	}
}
