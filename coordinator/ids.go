package coordinator

import "github.com/slackline/slackline/internal/ids"

// newID returns a random identifier (a version-4 UUID).
func newID() string { return ids.New() }
