package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// CheckDemoInputs names the first file a demo boot needs that is missing,
// and the make target that builds it: the kernel and initramfs (make
// initramfs), and demo.img, demo.img.zst and SHA256SUMS in imageDir (make
// demo-image).
func CheckDemoInputs(kernel, initrd, imageDir string) error {
	for _, f := range []struct{ path, make string }{
		{kernel, "make initramfs"},
		{initrd, "make initramfs"},
		{filepath.Join(imageDir, DemoImage), "make demo-image"},
		{filepath.Join(imageDir, DemoImageZst), "make demo-image"},
		{filepath.Join(imageDir, ChecksumsFile), "make demo-image"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%w (run '%s')", err, f.make)
		}
	}
	return nil
}
