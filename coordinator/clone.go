package coordinator

import (
	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

func cloneFrameworkInfo(in *slacklinev1.FrameworkInfo) *slacklinev1.FrameworkInfo {
	return proto.CloneOf(in)
}

func cloneTaskInfo(in *slacklinev1.TaskInfo) *slacklinev1.TaskInfo {
	return proto.CloneOf(in)
}

// mustMarshal encodes a registry record. Marshalling a valid message we
// built cannot fail; a failure is a programming error.
func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic("marshal registry record: " + err.Error())
	}
	return b
}
