package resources

import (
	"errors"
	"math"
	"strings"
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

func TestParseAndString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"cpus:4;mem:8192", "cpus:4;mem:8192"},
		{" cpus : 0.5 ; mem:128 ;", "cpus:0.5;mem:128"},
		{"cpus:1;cpus:2", "cpus:3"},
		{"ports:[31000-32000,33000-33010]", "ports:[31000-32000,33000-33010]"},
		{"ports:[5-6,7-8]", "ports:[5-8]"},
		{"ports:[80]", "ports:[80-80]"},
		{"disk:1024;cpus:2;mem:1", "cpus:2;mem:1;disk:1024"},
		{"bandwidth:1000;cpus:1", "cpus:1;bandwidth:1000"},
		{"bandwidth:0.5;bandwidth:99.5", "bandwidth:100"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := r.String(); got != tt.want {
				t.Fatalf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseErrorsNameTheValue(t *testing.T) {
	tests := []struct {
		in, mention string
	}{
		{"cpus:-1", "-1"},
		{"cpus:NaN", "NaN"},
		{"mem:+Inf", "+Inf"},
		{"gpus:1", `"gpus"`},
		{"cpus", `"cpus"`},
		{"cpus:abc", `"abc"`},
		{"ports:[10-5]", "[10-5]"},
		{"ports:[1-10,5-20]", "overlap"},
		{"ports:[1-10];ports:[10-12]", "overlap"},
		{"ports:[1-70000]", "70000"},
		{"ports:1-2", "1-2"},
		{"cpus:1e300", "1e+300"},
		{"bandwidth:-10", "-10"},
		{"bandwith:10", "bandwidth"}, // the error lists the known names
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := Parse(tt.in)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error = %v, want ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("Parse(%q) error %q does not mention %q", tt.in, err, tt.mention)
			}
		})
	}
}

func TestArithmetic(t *testing.T) {
	a := MustParse("cpus:4;mem:1024;ports:[100-200]")
	b := MustParse("cpus:1.5;mem:24;ports:[150-160]")
	diff := a.Sub(b)
	if got, want := diff.String(), "cpus:2.5;mem:1000;ports:[100-149,161-200]"; got != want {
		t.Fatalf("Sub = %q, want %q", got, want)
	}
	if !a.Contains(b) || b.Contains(a) {
		t.Fatalf("Contains wrong: a⊇b=%v b⊇a=%v", a.Contains(b), b.Contains(a))
	}
	if !diff.Add(b).Equal(a) {
		t.Fatalf("(a-b)+b = %v, want %v", diff.Add(b), a)
	}
	if got := MustParse("cpus:1").Sub(MustParse("cpus:2;mem:5")); !got.IsEmpty() {
		t.Fatalf("Sub below zero = %v, want empty", got)
	}
	if got, want := a.Min(MustParse("cpus:2;mem:2048;ports:[190-300]")).String(), "cpus:2;mem:1024;ports:[190-200]"; got != want {
		t.Fatalf("Min = %q, want %q", got, want)
	}
	// Fixed point: no drift.
	var sum Resources
	for range 10 {
		sum = sum.Add(New(0.1, 0, 0))
	}
	if sum.CPUs() != 1 {
		t.Fatalf("ten times 0.1 cpus = %v, want 1", sum.CPUs())
	}
}

func TestDominantShare(t *testing.T) {
	total := MustParse("cpus:9;mem:18432")
	if got := MustParse("cpus:1;mem:4096").DominantShare(total); math.Abs(got-2.0/9) > 1e-9 {
		t.Fatalf("share = %v, want 2/9", got)
	}
	if got := MustParse("cpus:3;mem:1024").DominantShare(total); math.Abs(got-1.0/3) > 1e-9 {
		t.Fatalf("share = %v, want 1/3", got)
	}
}

func TestRangesDifference(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"[1-10]", "[1-10]", "[]"},
		{"[1-10]", "[0-20]", "[]"},
		{"[1-10]", "[3-4,6-7]", "[1-2,5-5,8-10]"},
		{"[1-10,20-30]", "[5-25]", "[1-4,26-30]"},
		{"[1-10]", "[11-12]", "[1-10]"},
		{"[0-0]", "[0-0]", "[]"},
	}
	for _, tt := range tests {
		a, _ := ParseRanges(tt.a)
		b, _ := ParseRanges(tt.b)
		if got := a.difference(b).String(); got != tt.want {
			t.Errorf("%s - %s = %s, want %s", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestProtoRoundTrip(t *testing.T) {
	r := MustParse("cpus:2;mem:512;ports:[31000-31010]")
	list := append(r.Proto("eng", Regular), MustParse("cpus:1").Proto("eng", Revocable)...)
	regular, revocable, err := FromProto(list)
	if err != nil {
		t.Fatal(err)
	}
	if !regular.Equal(r) || revocable.String() != "cpus:1" {
		t.Fatalf("round trip = %v / %v", regular, revocable)
	}
}

func TestBandwidthIsAScalarLikeTheOthers(t *testing.T) {
	node := MustParse("cpus:4;bandwidth:1000")
	task := MustParse("cpus:1;bandwidth:100")
	if got := node.Sub(task).Bandwidth(); got != 900 {
		t.Errorf("Sub bandwidth = %v, want 900", got)
	}
	if node.Contains(MustParse("bandwidth:1001")) {
		t.Error("1000 Mbit/s contains 1001")
	}
	if got := MustParse("bandwidth:500").DominantShare(node); got != 0.5 {
		t.Errorf("DominantShare = %v, want 0.5 (bandwidth counts)", got)
	}
	list := MustParse("bandwidth:250").Proto("", Revocable)
	if len(list) != 1 || list[0].GetName() != NameBandwidth || list[0].GetScalar() != 250 || !list[0].GetRevocable() {
		t.Fatalf("Proto = %v", list)
	}
	_, revocable, err := FromProto(list)
	if err != nil || revocable.Bandwidth() != 250 {
		t.Fatalf("FromProto = %v, %v", revocable, err)
	}
}

func TestFromProtoRejects(t *testing.T) {
	tests := []struct {
		name string
		res  *slacklinev1.Resource
	}{
		{"negative", &slacklinev1.Resource{Name: "cpus", Scalar: -1}},
		{"nan", &slacklinev1.Resource{Name: "mem", Scalar: math.NaN()}},
		{"inf", &slacklinev1.Resource{Name: "mem", Scalar: math.Inf(1)}},
		{"unknown", &slacklinev1.Resource{Name: "bananas", Scalar: 1}},
		{"inverted", &slacklinev1.Resource{Name: "ports", Ranges: []*slacklinev1.Range{{Begin: 9, End: 1}}}},
		{"overlapping", &slacklinev1.Resource{Name: "ports", Ranges: []*slacklinev1.Range{{Begin: 1, End: 5}, {Begin: 5, End: 9}}}},
		{"scalar with ranges", &slacklinev1.Resource{Name: "cpus", Ranges: []*slacklinev1.Range{{Begin: 1, End: 5}}}},
		{"ports with scalar", &slacklinev1.Resource{Name: "ports", Scalar: 3}},
		{"nil", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := FromProto([]*slacklinev1.Resource{tt.res}); !errors.Is(err, ErrInvalid) {
				t.Fatalf("FromProto error = %v, want ErrInvalid", err)
			}
		})
	}
}
