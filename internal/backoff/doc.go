// Package backoff is the one retry delay of Slackline: a jittered
// exponential backoff between Min and Max, reset once an attempt proves
// healthy. The agent session's re-registration and the framework SDK's
// re-subscription both use it.
//
// A delay is drawn uniformly from [d/2, d], d doubling from Min to Max with
// each failure, so that thousands of clients that lost the same coordinator
// do not come back in step. Backoff holds no clock and no goroutine: the
// caller sleeps (Sleep, Wait) or arms its own timer; tests pass a seeded
// Rand, or run in a testing/synctest bubble.
package backoff
