// Package images is the agent's image store: it pulls the OCI images
// tasks name (TaskInfo.image) with github.com/google/go-containerregistry
// from registries (distribution v2, token or basic auth from a Docker
// config.json-style credentials file), OCI layout directories and docker
// save tarballs, verifies them, and keeps their layers unpacked for
// overlayfs, shared between images and tasks.
//
// # Files
//
//	<Dir>/layers/<hex>/fs      a layer unpacked as an overlayfs lower dir (hex of its diff id)
//	<Dir>/layers/<hex>/size    its unpacked bytes; written last, so a layer without it is incomplete
//	<Dir>/images/<key>.json    an image: reference, manifest digest, diff ids, config, last use
//	<Dir>/leases/<holder>.json the layers a live container runs from
//	<Dir>/tmp/                 layers being unpacked (emptied by Open)
//
// Dir is root's, 0700: tasks reach their layers only through their
// overlay. Whiteouts become overlayfs whiteouts (character devices 0:0,
// trusted.overlay.opaque), unpacking goes through an os.Root and refuses
// ".." (extract.go).
//
// # Verification
//
// A reference pinned by digest must match the manifest's digest (and the
// registry client checks it too); the config must hash to the manifest's
// config digest; each layer's uncompressed content must hash to the
// config's diff id, which names it in the store. An image is recorded
// only once all of its layers are unpacked and verified.
//
// # Pulls, leases and collection
//
// Acquire shares one pull among every caller of a reference
// (singleflight), runs at most Config.Pulls at once, bounds each by
// Config.PullTimeout (detached from callers, whose contexts end only
// their own wait), and leases the image's layers to the caller's
// container until Release. A cached image is used without asking the
// registry (tags are not re-resolved). After each Acquire and Retain,
// the store collects (planGC, pure): layers no image and no lease uses,
// then least-recently-used images no live container runs from, until
// the unpacked layers fit Config.BudgetBytes; a leased layer is never
// removed, nor an image an Acquire is under way for, nor a layer a pull
// is unpacking (without these, a budget smaller than the images in use
// let one task's collection remove another's image between its pull and
// its lease: TestConcurrentAcquiresUnderATinyBudget). Leases are files, so they survive agent restarts (written
// without fsync on the launch path: a host crash also ends every container
// that held one); the agent calls Retain with the containers it recovered.
//
// # Locking
//
// One mutex guards the index (images, layers, leases, recent errors); no
// network or layer I/O happens under it. Small metadata files are written
// after it is released.
//
// # Errors
//
// Acquire's errors wrap ErrPull and name the image and a kind (timeout,
// auth, not_found, digest, unreachable, registry, local, other: the label
// of slackline_agent_image_pull_errors_total), or wrap
// imageref.ErrInvalid for a reference that does not parse.
package images
