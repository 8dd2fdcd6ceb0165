package supervisor

import (
	"bytes"
	"testing"
	"time"
)

// TestShimStages: the supervisor reads back the stages the shim wrote,
// and tells an error after them (or without them) apart from a success.
func TestShimStages(t *testing.T) {
	t.Parallel()
	st := shimStages{main: time.Unix(0, 1000), joined: time.Unix(0, 2000), isolated: time.Unix(0, 3000)}
	var line bytes.Buffer
	st.write(&line)
	for _, tc := range []struct {
		name      string
		msg       string
		want      shimStages
		wantError string
	}{
		{"success", line.String(), st, ""},
		{"exec failed after the stages", line.String() + "exec /bin/x: permission denied", st, "exec /bin/x: permission denied"},
		{"setup failed before", "join cgroup /sys/fs/cgroup/x: EBUSY", shimStages{}, "join cgroup /sys/fs/cgroup/x: EBUSY"},
		{"nothing written", "", shimStages{}, ""},
		{"malformed stages are an error", "stages 1 x 3\n", shimStages{}, "stages 1 x 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rest := parseShimStages([]byte(tc.msg))
			if !got.main.Equal(tc.want.main) || !got.joined.Equal(tc.want.joined) || !got.isolated.Equal(tc.want.isolated) {
				t.Errorf("stages = %+v, want %+v", got, tc.want)
			}
			if string(rest) != tc.wantError {
				t.Errorf("error = %q, want %q", rest, tc.wantError)
			}
		})
	}
}
