package agent

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// GetImages lists the image store's images, its disk use and its recent
// pull failures; an agent without an image store has none.
func (s nodeService) GetImages(context.Context, *connect.Request[slacklinev1.GetImagesRequest]) (*connect.Response[slacklinev1.GetImagesResponse], error) {
	resp := &slacklinev1.GetImagesResponse{}
	if s.a.cfg.Images == nil {
		return connect.NewResponse(resp), nil
	}
	u := s.a.cfg.Images.Usage()
	resp.StoreBytes, resp.BudgetBytes, resp.Layers = u.StoreBytes, u.Budget, int32(u.Layers)
	for _, img := range u.Images {
		resp.Images = append(resp.Images, &slacklinev1.Image{
			Reference: img.Reference, Digest: img.Digest, SizeBytes: img.SizeBytes,
			Layers: int32(img.Layers), Tasks: int32(img.Tasks),
			PulledTime: timestamppb.New(img.PulledAt), LastUsedTime: timestamppb.New(img.LastUsed),
		})
	}
	for _, e := range u.RecentErrors {
		resp.RecentErrors = append(resp.RecentErrors, &slacklinev1.ImagePullError{Reference: e.Reference, Message: e.Message, Time: timestamppb.New(e.Time)})
	}
	return connect.NewResponse(resp), nil
}
