package supervisor

import (
	"os"
	"testing"
)

func TestParseStatStartTime(t *testing.T) {
	stat := "1234 (we)ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100"
	got, err := parseStatStartTime([]byte(stat))
	if err != nil || got != 987654 {
		t.Errorf("parseStatStartTime = %d, %v; want 987654", got, err)
	}
	if _, err := parseStatStartTime([]byte("1 (x) S 1")); err == nil {
		t.Error("short stat accepted")
	}
	st, err := ProcStartTime("/proc", os.Getpid())
	if err != nil || st == 0 || !Alive("/proc", &ProcRef{Pid: os.Getpid(), StartTime: st}) {
		t.Errorf("own start time = %d, %v", st, err)
	}
	if Alive("/proc", &ProcRef{Pid: os.Getpid(), StartTime: st + 1}) {
		t.Error("a pid with another start time counts as alive")
	}
}
