// Package web holds the dlm server's dashboard: a single page of plain HTML,
// JavaScript and CSS (no framework, no build step) embedded in the binary.
//
// The page follows the server's live feed, GET v1/events (Server-Sent
// Events, one JSON snapshot per event, relative to the page's URL), and
// shows the cluster's members and leader, every resource with its holders
// and queues in order, and the open sessions with their time to live. Its
// filter by resource name prefix is passed to the feed as ?prefix=, so the
// server does the filtering. Everything the page shows is set as text, never
// as markup. When the server wants credentials (GET v1/whoami answers 401),
// the page asks for a token and trades it for an HttpOnly session cookie
// (POST v1/login), which the feed then carries; the page keeps no token.
//
// The package imports nothing of the project: the server mounts Handler at
// "/".
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// FS returns the dashboard's files: index.html, app.js, style.css and
// favicon.svg at its root.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return sub
}

// ContentSecurityPolicy is the policy Handler sends with every file: the
// page loads only its own scripts, styles and images and connects only to
// its own origin, so a resource name or label that slipped into markup
// could still not run script.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns an http.Handler that serves the dashboard's files, with
// index.html at "/", and 404 for anything else. It sends
// ContentSecurityPolicy, nosniff and no-cache headers (the files carry no
// modification time, and change with the binary). Mount it at "/", or under
// a prefix with http.StripPrefix: the page finds the feed relative to its
// own URL.
func Handler() http.Handler {
	files := http.FileServerFS(FS())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
