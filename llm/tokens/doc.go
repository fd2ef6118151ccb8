// Package tokens counts the tokens of a model request before it is sent, and
// knows each model's context window, so that a long session can be compacted
// before the provider refuses it (issue 38).
//
// A count is only as good as the tokenizer behind it. OpenAI publishes its
// tokenizers (tiktoken) and a Go port exists, so OpenAI models are counted
// exactly: o200k_base for the gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and o-series
// families, cl100k_base for gpt-4, gpt-3.5 and the text-embedding models.
// Every other model (Claude, llama, the script provider) gets a bytes-based
// estimate that errs high, and a Calibrator that learns, per model, how far
// the provider's reported usage is above the estimate. The error is one-sided
// on purpose: an over-count compacts a session a little early, an under-count
// sends a request the provider refuses.
//
// The window table (Table, Limits) holds the vendors' documented context and
// output limits, shipped in default_windows.yaml and overridable by
// configuration (Config, Table.Merge).
//
// The tokenizer is not free to build: github.com/tiktoken-go/tokenizer
// compiles its vocabularies in as Go map literals, about 7 s of CPU for a cold
// build and 9 s for a cold race build on a 2-core machine (plus 2 to 4 s for
// its regexp engine), and 12 MB of binary. The vocabularies are built into
// maps only on first use, so a process that counts no OpenAI prompt pays
// none of that at run time.
//
// The package imports nothing of the module but llm: the worker, the
// providers' fakes and the bench all count with it.
package tokens
