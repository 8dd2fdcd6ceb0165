package qos

// Noop is the "noop" controller: it never corrects anything, so revocable
// work runs unchecked (Mesos's NoopQoSController).
type Noop struct{}

// Evaluate returns nil.
func (Noop) Evaluate(Input) []Correction { return nil }
