package tokens_test

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/tokens"
)

// A worker counts the next request before sending it, and compacts the
// session when the request and its answer would not leave a margin in the
// model's window.
func Example() {
	req := llm.Request{
		Model:     "gpt-4o",
		MaxTokens: 1000,
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are a careful engineer."},
			{Role: llm.RoleUser, Content: "hello world"},
		},
	}
	var cal tokens.Calibrator
	input := cal.Estimate(req.Model, req)
	limits, _ := tokens.Default().Lookup(req.Model)
	fmt.Println(tokens.ForModel(req.Model).Name(), input, limits.Context)
	fmt.Println("fits:", limits.Fits(input, req.MaxTokens))

	// The provider reported more input tokens than counted: later
	// estimates for the model are scaled up.
	cal.Observe(req.Model, input, input*5/4)
	fmt.Printf("scale %.2f\n", cal.Scale(req.Model))
	// Output:
	// o200k_base 19 128000
	// fits: true
	// scale 1.21
}
