// Package studio is the browser UI at /app (ADR 6): server-rendered HTML shells
// and embedded vanilla JavaScript, no build step.
//
// The pages hold no data. A navigation cannot carry an Authorization header, and
// the bearer token must never sit in a URL or in a cookie a script can read, so
// each shell's script reads the token from sessionStorage and calls the JSON API
// (/api/...) with it, and reads a run's live events from the SSE stream with
// fetch and a streaming body reader (EventSource cannot send headers). Every
// page therefore sees exactly what the API's roles and ownership let the token
// see, and there is no cookie a cross-site request could ride on (no CSRF). The
// one cookie is asynqmon's (the fleet page's "Open asynqmon", an admin's): the
// API sets it only for /monitoring, HttpOnly and SameSite=Strict, and never
// reads it on /api (docs/api-edge.md).
//
// Everything a run produced is untrusted: the script inserts it with textContent
// and createTextNode only, the pages run under a strict Content-Security-Policy
// (scripts and styles from this origin's files only, nothing inline), workspace
// files are downloads the API serves as opaque, sandboxed attachments, and an
// image or video is shown inline only after its bytes were recognised as one.
package studio
