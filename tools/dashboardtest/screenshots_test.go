package dashboardtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run of the tests leaves the tracked screenshots alone: they go to a
// temporary folder unless -screenshots asks for docs/screenshots.
func TestScreenshotsGoToATemporaryFolderUnlessAsked(t *testing.T) {
	docs, err := filepath.Abs(screenshots)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(screenshotDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if !*writeScreenshots && (dir == docs || strings.HasPrefix(dir, docs+string(filepath.Separator))) {
		t.Fatalf("without -screenshots, screenshots go to %s, the tracked docs/screenshots", dir)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		t.Errorf("the screenshots' folder %s: %v", dir, err)
	}
}
