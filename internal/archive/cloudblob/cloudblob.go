// Package cloudblob registers the archive's cloud bucket drivers with
// gocloud.dev/blob: s3:// (AWS S3 and any S3-compatible store) and gs://
// (Google Cloud Storage). The service binaries that open an archive
// (cmd/projector, cmd/query) import it for that effect alone:
//
//	import _ "github.com/correx/sessions/internal/archive/cloudblob"
//
// internal/archive itself links only file:// and mem://, so that a program
// which archives to a directory or to memory (pkg/testkit, the devstack)
// links no cloud SDK: the AWS and Google Cloud SDKs and gRPC are several
// hundred packages. archive.Open names this package when a URL's scheme
// needs a driver the program does not link.
package cloudblob

import (
	_ "gocloud.dev/blob/gcsblob" // gs://
	_ "gocloud.dev/blob/s3blob"  // s3://
)
