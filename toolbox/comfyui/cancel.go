package comfyui

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui"
)

// Canceler stops a finished (cancelled, failed) run's ComfyUI work: its
// pending prompts are deleted from the queue (POST /queue {delete}) and its
// running one interrupted (POST /interrupt). The run's prompts are those whose
// client_id starts with ClientPrefix(runID), so nothing but ComfyUI's queue is
// consulted. It covers every image model's service and comfyui_video's.
// run:cleanup calls it before it releases the run's leases: the requests carry
// the run's own grant, which the fencing proxy still admits.
type Canceler struct {
	Leases *lease.Manager
	Client comfyui.Config
	// VideoService is comfyui.video_service. Default DefaultVideoService.
	VideoService string
}

// services are the ComfyUI services a run's prompts may be on, sorted.
func (c Canceler) services() []string {
	video := c.VideoService
	if video == "" {
		video = DefaultVideoService
	}
	seen := map[string]bool{video: true}
	services := []string{video}
	for _, m := range Models {
		if !seen[m.Service] {
			seen[m.Service] = true
			services = append(services, m.Service)
		}
	}
	sort.Strings(services)
	return services
}

// CancelRun implements the cleanup hook.
func (c Canceler) CancelRun(ctx context.Context, runID string) error {
	if c.Leases == nil {
		return nil
	}
	var errs []error
	for _, name := range c.services() {
		svc, ok := c.Leases.Service(name)
		if !ok || svc.URL == "" {
			continue
		}
		// Held, not State: the request needs the grant's secret, which no
		// listing carries.
		g, held, err := c.Leases.Held(ctx, name, runID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !held {
			continue // not held: the run cannot have work running there
		}
		cl, err := comfyui.New(svc.URL, g, "", c.Client)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := cancelOn(ctx, cl, ClientPrefix(runID)); err != nil {
			errs = append(errs, fmt.Errorf("comfyui %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func cancelOn(ctx context.Context, cl *comfyui.Client, prefix string) error {
	qs, err := cl.QueueState(ctx)
	if err != nil {
		return err
	}
	var pending []string
	for _, it := range qs.Pending {
		if strings.HasPrefix(it.ClientID, prefix) {
			pending = append(pending, it.PromptID)
		}
	}
	// Dequeue first, so the interrupt does not let a queued prompt of the run start.
	if len(pending) > 0 {
		if err := cl.Delete(ctx, pending...); err != nil {
			return err
		}
	}
	for _, it := range qs.Running {
		if strings.HasPrefix(it.ClientID, prefix) {
			if err := cl.Interrupt(ctx, it.PromptID); err != nil {
				return err
			}
		}
	}
	return nil
}
