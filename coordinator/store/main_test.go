package store

import (
	"os"
	"testing"

	"github.com/slackline/slackline/internal/etcdtest"
)

// TestMain stops the etcd member the tests share (etcdtest.Shared) once
// they ran.
func TestMain(m *testing.M) { os.Exit(etcdtest.RunShared(m)) }
