// Package protocol holds the wire-level names that the coordinator and the
// framework SDK (frameworkapi) must agree on beyond the protobuf API, so
// that each is defined once. It has no state and no behaviour.
package protocol

// StreamIDHeader is the HTTP header that carries a framework's stream id:
// the coordinator sets it on the Subscribe response, and the framework
// sends it on every SchedulerService call after Subscribe.
const StreamIDHeader = "Slackline-Stream-Id"

// LeaderHeader is the HTTP response header by which a coordinator that is
// not its group's leader says so, on every response: its value is the
// leader's advertised URL, empty while none is known. The leader never
// sets it; clients that know several coordinators (internal/leaderclient)
// follow it.
const LeaderHeader = "Slackline-Leader"
