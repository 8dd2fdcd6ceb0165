package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/theory/jsonpath"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Output formats of -o, as kubectl's: a table, the table with more
// columns, the response in JSON or YAML (protojson's field names), or the
// values a JSONPath expression selects from the JSON.
const (
	outputTable    = "table"
	outputWide     = "wide"
	outputJSON     = "json"
	outputYAML     = "yaml"
	outputJSONPath = "jsonpath="
)

// outputHelp describes -o.
const outputHelp = "output format: table, wide (more columns), json, yaml, or jsonpath=EXPR " +
	"(RFC 9535, e.g. '$.agents[*].hostname'; kubectl's '{.agents[*].hostname}' works too; one value per line)"

// parseOutput checks -o and returns the compiled JSONPath of jsonpath=.
func parseOutput(format string) (*jsonpath.Path, error) {
	switch format {
	case outputTable, outputWide, outputJSON, outputYAML:
		return nil, nil
	}
	expr, ok := strings.CutPrefix(format, outputJSONPath)
	if !ok {
		return nil, usageErrorf("unknown output format %q: want table, wide, json, yaml or jsonpath=EXPR", format)
	}
	// kubectl's template form: {.a.b} is $.a.b.
	if inner, ok := strings.CutPrefix(expr, "{"); ok {
		expr = strings.TrimSuffix(inner, "}")
	}
	if strings.HasPrefix(expr, ".") || strings.HasPrefix(expr, "[") {
		expr = "$" + expr
	}
	p, err := jsonpath.Parse(expr)
	if err != nil {
		return nil, usageErrorf("-o jsonpath=%s: %v", expr, err)
	}
	return p, nil
}

// print writes a response in the -o format: t for table and wide, else
// msg itself.
func (g *globals) print(msg proto.Message, t table) error {
	switch g.output {
	case outputTable:
		return t.write(g.out)
	case outputWide:
		t.narrow = 0
		return t.write(g.out)
	}
	data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return g.printData(data)
}

// printValue is print for a value that is not a message (encoding/json's
// field names).
func (g *globals) printValue(v any, t table) error {
	switch g.output {
	case outputTable:
		return t.write(g.out)
	case outputWide:
		t.narrow = 0
		return t.write(g.out)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return g.printData(data)
}

// printData writes a JSON document in the json, yaml or jsonpath format.
func (g *globals) printData(data []byte) error {
	switch g.output {
	case outputJSON:
		_, err := fmt.Fprintf(g.out, "%s\n", escapeJSON(data))
		return err
	case outputYAML:
		out, err := yaml.JSONToYAML(data)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = g.out.Write([]byte(escapeText(string(out))))
		return err
	}
	path, err := parseOutput(g.output)
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("decode json: %w", err)
	}
	var b strings.Builder
	for _, v := range path.Select(doc) {
		if s, ok := v.(string); ok {
			b.WriteString(escapeText(s))
		} else {
			enc, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("encode json: %w", err)
			}
			b.Write(escapeJSON(enc))
		}
		b.WriteByte('\n')
	}
	_, err = fmt.Fprint(g.out, b.String())
	return err
}

// usageError is a command line that is wrong: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// isUsage reports whether err is a usage error.
func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}
