package lease

import "strings"

// A holder is a run id, or a run's post-run work named by a prefix and the run
// id: "finish:<run>" for finish_image's upscale. The API shows a holder to the
// run's owner only, so it must find the run behind either form.
const postRunPrefix = "finish:"

// PostRunHolder is the holder of a run's post-run work.
func PostRunHolder(runID string) string { return postRunPrefix + runID }

// HolderRun is the run a holder belongs to (the holder itself for a run's own
// lease).
func HolderRun(holder string) string {
	if id, ok := strings.CutPrefix(holder, postRunPrefix); ok {
		return id
	}
	return holder
}
