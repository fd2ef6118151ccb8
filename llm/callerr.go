package llm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// SDKError is what a provider SDK's error type says of a failed HTTP call.
type SDKError struct {
	Status   int
	Message  string
	RawJSON  string
	Response *http.Response
}

// maxAPIMessage bounds an APIError's message: an HTML error page from a proxy
// must not flood logs and run events.
const maxAPIMessage = 512

// CallError is the error of a failed provider call (op names it, e.g. "openai:
// chat completion"): a context that ended first keeps its cause (errors.Is sees
// context.Canceled or DeadlineExceeded); an HTTP failure — from the SDK's error
// (sdk, nil when the SDK gave none) or from the raw response when the SDK could not
// read its body — becomes an *APIError with a bounded message.
func CallError(ctx context.Context, op, provider string, err error, sdk *SDKError, resp *http.Response) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w (%w)", ctxErr, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if sdk != nil {
		msg := sdk.Message
		if msg == "" {
			msg = cmp.Or(sdk.RawJSON, responseText(sdk.Response))
		}
		return fmt.Errorf("%s: %w", op, newAPIError(provider, sdk.Status, msg))
	}
	if resp != nil && resp.StatusCode >= 400 {
		// The SDK could not parse the error body (plain text from a proxy, say);
		// the status is what callers act on.
		return fmt.Errorf("%s: %w", op, newAPIError(provider, resp.StatusCode, responseText(resp)))
	}
	return fmt.Errorf("%s: %w", op, err)
}

func newAPIError(provider string, status int, msg string) *APIError {
	msg = strings.TrimSpace(msg)
	if len(msg) > maxAPIMessage {
		msg = strings.ToValidUTF8(msg[:maxAPIMessage], "") + "…"
	}
	if msg == "" {
		msg = cmp.Or(http.StatusText(status), "status "+strconv.Itoa(status))
	}
	return &APIError{Provider: provider, Status: status, Message: msg}
}

// responseText reads what is left of an error response's body; the SDKs leave it
// buffered in memory for diagnostics.
func responseText(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(body)
}
