// Package pricing knows what each model call cost, exactly.
//
// A price table (YAML, see Parse) gives each provider+model its prices in
// dollars per million tokens for four classes of token: uncached input,
// input read from the prompt cache, input written to it, and output. Prices
// are read from their decimal text into llm.Money per token (picodollars per
// token, which is microdollars per million tokens) without any float, so a
// call's cost is an integer product and costs add up with no drift: the sum
// of many calls' costs is exactly the cost of their summed tokens.
//
// A model is found by its exact name, then by an alias, then, on lines marked
// `match: prefix`, by its name plus a dated-snapshot suffix only (Table.Lookup):
// one model family is never priced as another ("gpt-4o-mini" is not "gpt-4o").
//
// Default is the table shipped with the fleet (default_prices.yaml), written
// from memory of the vendors' public price pages and dated by its as_of: check
// it against the vendors before trusting it with money, and give the fleet a
// file of your own (Load, then Merge over Default) for the prices you checked.
//
// Meter is the middleware that sets llm.Response.Cost and Priced on every
// successful call.
package pricing
