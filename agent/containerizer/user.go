package containerizer

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
)

// DefaultTaskUser is the user tasks run as when neither the task nor its
// framework names one and Config.TaskUser is empty: a dynamic user of
// each task's own.
const DefaultTaskUser = DynamicTaskUser

// ErrTaskUser is wrapped by Launch (and New, for Config.TaskUser) when the
// user a task would run as cannot be used: unknown on this host, or root
// (uid 0) without Config.AllowRootTasks. The task's description is at
// fault, not the node: retrying the same task here fails the same way.
var ErrTaskUser = errors.New("task user refused")

// resolveUser looks name up in the host's user database (names only: a
// number is not taken for a uid) and applies the root rule.
func resolveUser(name string, allowRoot bool) (*taskUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%w: user %q does not exist on this agent", ErrTaskUser, name)
		}
		return nil, fmt.Errorf("%w: look up user %q: %v", ErrTaskUser, name, err)
	}
	uid, err := parseID(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("%w: user %q has uid %q: %v", ErrTaskUser, name, u.Uid, err)
	}
	gid, err := parseID(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("%w: user %q has gid %q: %v", ErrTaskUser, name, u.Gid, err)
	}
	if uid == 0 && !allowRoot {
		return nil, fmt.Errorf("%w: user %q is root (uid 0), and this agent runs no task as root (it was not started with --allow-root-tasks)", ErrTaskUser, name)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("%w: supplementary groups of %q: %v", ErrTaskUser, name, err)
	}
	tu := &taskUser{Name: u.Username, UID: uid, GID: gid, Home: u.HomeDir}
	for _, g := range gids {
		id, err := parseID(g)
		if err != nil {
			return nil, fmt.Errorf("%w: user %q is in group %q: %v", ErrTaskUser, name, g, err)
		}
		tu.Groups = append(tu.Groups, id)
	}
	return tu, nil
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}
