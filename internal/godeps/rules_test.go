package godeps

import "testing"

// cloudSDKs are the cloud providers' SDKs and the archive's drivers that
// link them (internal/archive/cloudblob registers those drivers in the
// service binaries only). gocloud.dev/blob itself links Google's error
// types (google.golang.org/api/googleapi, through gax-go), not its clients.
var cloudSDKs = []string{
	"github.com/aws",
	"cloud.google.com/go",
	"google.golang.org/api/storage",
	"google.golang.org/api/option",
	"google.golang.org/api/transport",
	"google.golang.org/api/iamcredentials",
	"golang.org/x/oauth2/google",
	"github.com/Azure",
	"gocloud.dev/aws",
	"gocloud.dev/gcp",
	"gocloud.dev/azure",
	"gocloud.dev/blob/s3blob",
	"gocloud.dev/blob/gcsblob",
	"gocloud.dev/blob/azureblob",
	"github.com/correx/sessions/internal/archive/cloudblob",
}

// TestDependencyRules holds the repository's rules on what a package
// links (links) and what it imports itself (imports).
func TestDependencyRules(t *testing.T) {
	tests := []struct {
		name, pkg string
		links     Rules
		imports   Rules
	}{
		{
			// A user's test that starts the kit archives to file:// or
			// mem:// at most; the cloud SDKs are hundreds of packages and
			// dozens of lines in that user's go.mod. The kit drives the
			// stack through internal/devstack, not the projector's own
			// configuration.
			name: "pkg/testkit", pkg: "github.com/correx/sessions/pkg/testkit",
			links:   Rules{Deny: cloudSDKs},
			imports: Rules{Deny: []string{"github.com/correx/sessions/internal/projector"}},
		},
		{
			name: "pkg/testkit/correx", pkg: "github.com/correx/sessions/pkg/testkit/correx",
			links: Rules{Deny: cloudSDKs},
		},
		{
			name: "internal/archive", pkg: "github.com/correx/sessions/internal/archive",
			links: Rules{Deny: cloudSDKs},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Check(t, tt.pkg, tt.links)
			CheckImports(t, tt.pkg, tt.imports)
		})
	}
}

// TestServicesLinkTheCloudDrivers: the binaries that open an archive link
// its s3:// and gs:// drivers, so that moving them out of internal/archive
// took nothing from the services.
func TestServicesLinkTheCloudDrivers(t *testing.T) {
	for _, pkg := range []string{"cmd/projector", "cmd/query"} {
		r := &recorder{TB: t}
		Check(r, "github.com/correx/sessions/"+pkg, Rules{Deny: []string{"gocloud.dev/blob/s3blob", "gocloud.dev/blob/gcsblob"}})
		if len(r.errs) < 2 {
			t.Errorf("%s links the drivers of s3:// and gs:// no more: %q", pkg, r.errs)
		}
	}
}
