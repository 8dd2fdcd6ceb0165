package auth

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/slackline/slackline/gen/slackline/v1" // registers the slackline.v1 descriptors
)

// procedures lists every RPC of every slackline.v1 service, from the
// generated file descriptors: a service or method added to the protos
// appears here without anyone listing it.
func procedures(t *testing.T) map[string]protoreflect.MethodDescriptor {
	t.Helper()
	out := map[string]protoreflect.MethodDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("slackline.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				out[fmt.Sprintf("/%s/%s", svc.FullName(), m.Name())] = m
			}
		}
		return true
	})
	if len(out) < 30 {
		t.Fatalf("found only %d procedures in the slackline.v1 descriptors", len(out))
	}
	return out
}

// TestEveryProcedureHasARule fails when an RPC has no authorization rule,
// or a rule that the interceptor cannot apply.
func TestEveryProcedureHasARule(t *testing.T) {
	for proc, m := range procedures(t) {
		rule, ok := Rules[proc]
		if !ok {
			t.Errorf("%s has no authorization rule in auth.Rules", proc)
			continue
		}
		if rule.Caller == Anyone {
			t.Errorf("%s is open to anyone: only health checks may be", proc)
		}
		if rule.Action == "" && rule.Handler == "" {
			t.Errorf("%s: a rule checks an action or names what its handler checks", proc)
		}
		if rule.Action != "" {
			if _, known := objectKeys[rule.Action]; !known {
				t.Errorf("%s: unknown action %q", proc, rule.Action)
			}
			if (ObjectKey(rule.Action) != "") != (rule.Objects != nil) {
				t.Errorf("%s: action %s has object %q but Objects is %v", proc, rule.Action, ObjectKey(rule.Action), rule.Objects != nil)
			}
		}
		if rule.Objects != nil {
			if m.IsStreamingClient() || m.IsStreamingServer() {
				t.Errorf("%s streams: the interceptor checks objects of unary requests only", proc)
			}
			// The request type the Objects function asserts is the method's.
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: Objects on its request type: %v", proc, r)
					}
				}()
				req, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
				if err != nil {
					t.Fatal(err)
				}
				rule.Objects(req.New().Interface())
			}()
		}
	}
}
