// Package dashboardtest drives pgtask's web dashboard (runtime/dashboard) in
// a real browser: headless Chromium, through the DevTools protocol
// (chromedp), with page scripts disabled. Its test walks the pages, checks
// what a person sees, retries a failed job and pauses a queue through the
// forms, and takes a screenshot of each page: into a temporary folder, or
// into docs/screenshots (which docs/dashboard.md shows) when run with
// -screenshots:
//
//	go test ./tools/dashboardtest -run TestDashboardInChromium -screenshots
//
// It needs a chromium binary (Debian's chromium package, which .ci/run
// installs). Without one it skips, unless CI is set: there it fails.
package dashboardtest
