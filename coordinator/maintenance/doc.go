// Package maintenance is the coordinator's pure maintenance state machine:
// the maintenance schedule, the mode of every machine (UP, DRAINING, DOWN),
// the frameworks' answers to inverse offers, and the decisions derived from
// them (which machine an agent belongs to, whether a framework's declared
// minimum would break, whether a machine may be taken down by itself).
//
// # Model
//
// A machine is named by a hostname and/or an IP address (Machine). A
// Schedule is a list of windows; each window names machines that are
// unavailable together from its start, for its duration (zero: for good).
// The modes follow from the schedule and the set of DOWN machines:
//
//   - a machine in no window is UP;
//   - a machine in a window is DRAINING until StartMaintenance takes it
//     DOWN (it must be in the schedule, as in Mesos);
//   - StopMaintenance brings a DOWN machine UP and takes it out of the
//     schedule (a window left empty is dropped). A DOWN machine can leave
//     the schedule no other way.
//
// An agent belongs to a scheduled machine when the machine's hostname (if
// set, compared case-insensitively) and IP (if set) match the agent's;
// Lookup prefers a DOWN machine, then the first in schedule order.
//
// # Purity and ownership
//
// Nothing here reads a clock, starts a goroutine or does I/O: time comes in
// as arguments, as in the allocator. A State is not safe for concurrent
// use; the coordinator's core holds the current one (core.Maintenance),
// which changes only in a turn of the maintenance state's scope, so the
// coordinator computes a transition in that turn without its lock and
// installs the result under it. The
// transitions (UpdateSchedule, StartMaintenance, StopMaintenance) do not
// modify the receiver: they return a new State, so that the coordinator can
// persist the new state (Record) before installing it. Answers (Answer,
// RecordAnswer) are volatile and carried over by the transitions for
// machines whose window did not change.
//
// # Errors
//
// Invalid input wraps ErrInvalid and names what is at fault: the window
// index, the machine id index and the machine. A transition that the
// current modes forbid (starting maintenance of a machine that is not
// scheduled or already DOWN, stopping one that is not DOWN) wraps
// ErrFailedPrecondition. The coordinator maps them to InvalidArgument and
// FailedPrecondition.
package maintenance
