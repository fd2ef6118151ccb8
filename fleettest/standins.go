package fleettest

import (
	"context"

	"github.com/aetherium-engine/aetherium/tools"
)

// PDFArgs are the arguments of the download_pdf stand-in.
type PDFArgs struct {
	URL string `json:"url"`
}

// StandInPDF replaces download_pdf (Restricted), whose real one downloads and
// parses in the Docker sandbox, with one that only answers: for tests of the
// gate and the approvals around it, not of the tool (fleet.Options.ExtraTools).
func StandInPDF(reg *tools.Registry) {
	reg.Unregister("download_pdf")
	tools.Register(reg, "download_pdf", "stand-in", func(ctx context.Context, call tools.Call, a PDFArgs) (tools.Result, error) {
		return tools.Text("downloaded %s", a.URL), nil
	}, tools.Outbound(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Restricted), tools.AlwaysHuman())
}
