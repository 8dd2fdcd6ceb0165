package main

import (
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
)

// Exit statuses of slacklinectl, so that scripts can tell why a command
// failed (documented in doc.go and docs/operators.md).
const (
	exitOK          = 0
	exitError       = 1 // anything else (internal errors, invalid replies)
	exitUsage       = 2 // the command line is wrong: unknown command, flag or output format, missing arguments
	exitNotFound    = 3 // no such agent, framework, task, role or context
	exitDenied      = 4 // the caller is not authenticated or not allowed (unauthenticated, permission_denied)
	exitUnavailable = 5 // the coordinator or agent cannot be reached or answered too late (unavailable, deadline_exceeded)
)

// exitCode returns the exit status for err.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if isUsage(err) || cobraUsage(err) {
		return exitUsage
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return exitError
	}
	switch ce.Code() {
	case connect.CodeNotFound:
		return exitNotFound
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return exitDenied
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return exitUnavailable
	case connect.CodeInvalidArgument:
		return exitUsage
	}
	return exitError
}

// cobraUsage recognises the usage errors cobra makes itself (unknown
// commands; its argument validators).
func cobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command ", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least ", "invalid argument "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// notFoundf is a NotFound error (exit status 3).
func notFoundf(format string, args ...any) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf(format, args...))
}
