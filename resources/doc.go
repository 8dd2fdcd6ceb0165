// Package resources is Slackline's resource value type: scalar quantities
// (cpus; mem and disk in MiB; bandwidth, the node's egress network
// bandwidth, in Mbit/s) and port ranges, with the arithmetic the allocator
// needs (add, subtract, containment, dominant share), the text form used
// by flags and the CLI ("cpus:4;mem:8192;bandwidth:1000;ports:[31000-32000]")
// and conversion to and from the protobuf messages of slackline.v1. Every
// scalar is treated alike: the allocator, revocable estimates and offers
// carry bandwidth exactly as they carry cpus.
//
// A Resources value is immutable in practice: every operation returns a new
// value and never modifies its operands, so values can be shared freely
// between goroutines once built.
//
// Scalars are stored in fixed point with three decimals (like Mesos), so
// repeated addition and subtraction never drift: 0.1+0.2-0.3 is exactly 0.
//
// Errors: Parse and FromProto return errors wrapping ErrInvalid that name
// the offending resource and value; callers at the RPC boundary map them to
// InvalidArgument.
package resources
