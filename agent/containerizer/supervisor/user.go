package supervisor

import ()

// User is a resolved Unix user: what the exec shim switches to before
// it execs the task. It is recorded in the checkpoint and in launch.json.
type User struct {
	Name string `json:"name"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	// Groups are the supplementary groups (the primary one included, as
	// initgroups(3) would set them).
	Groups []uint32 `json:"groups,omitempty"`
	// Home is the user's home directory in the user database; the task's
	// HOME is its sandbox all the same.
	Home string `json:"home,omitempty"`
	// Dynamic marks a user of DynamicTaskUser: ids from
	// Config.DynamicIDs, no entry in the user database.
	Dynamic bool `json:"dynamic,omitempty"`
}

// name is u's name. A checkpoint without a user was written by an agent
// that ran every task as root.
func (u *User) Login() string {
	if u == nil {
		return "root"
	}
	return u.Name
}

// groupInts returns u's supplementary groups for unix.Setgroups.
func (u *User) groupInts() []int {
	out := make([]int, len(u.Groups))
	for i, g := range u.Groups {
		out[i] = int(g)
	}
	return out
}
