// Package leaderclient lets a client of a coordinator group talk to its
// leader: given the comma-separated list of coordinator URLs that agents,
// frameworks (frameworkapi, the example frameworks), slackline-sim and
// slacklinectl take in --coordinator, New returns an *http.Client whose
// Transport sends each request to the current leader and follows the
// group when the leader changes (see Transport for the rules), and the
// base URL to build Connect clients with. Callers keep their own retry
// loops: the transport only re-sends requests that no coordinator acted
// on (a follower's refusal, a connection that was never made).
//
// The leader is learnt from followers' answers: a coordinator that does
// not lead sets protocol.LeaderHeader on every response (coordinator/leader).
// A single URL needs none of this: New returns the base client unchanged.
//
// Lifecycle: a Transport is safe for concurrent use and holds no
// goroutine; the URL it uses is shared by every call.
package leaderclient
