package cliconfig

// ParsedValue is a flag.Value of a type with a parser and a formatter. It
// is a flag.Getter too, so that a config file's list for it is one
// comma-separated value (see the package comment).
type ParsedValue[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
}

// Parsed returns the flag.Value that sets *p to parse's result and prints
// it with format.
func Parsed[T any](p *T, parse func(string) (T, error), format func(T) string) ParsedValue[T] {
	return ParsedValue[T]{p, parse, format}
}

// Set parses s into the value.
func (v ParsedValue[T]) Set(s string) error {
	t, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}

// String formats the value ("" for flag's zero-value probe).
func (v ParsedValue[T]) String() string {
	if v.p == nil {
		return ""
	}
	return v.format(*v.p)
}

// Get returns the value (flag.Getter).
func (v ParsedValue[T]) Get() any { return *v.p }
