package oauthtest

import (
	"encoding/json"
	"fmt"
	"net/http"
)

func decodeJSON(resp *http.Response, out any) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Request.URL, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
