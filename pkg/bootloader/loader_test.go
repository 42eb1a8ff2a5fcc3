package bootloader

import (
	"errors"
	"strings"
	"testing"
)

func TestFindLoader(t *testing.T) {
	up := strings.ToUpper
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "shim preferred over grub and removable",
			files: map[string]string{"EFI/debian/" + shimName: "s", "EFI/debian/" + grubName: "g", "EFI/BOOT/" + removableName: "b"},
			want:  `\EFI\debian\` + shimName},
		{name: "grub without shim",
			files: map[string]string{"EFI/ubuntu/" + grubName: "g", "EFI/BOOT/" + removableName: "b"},
			want:  `\EFI\ubuntu\` + grubName},
		{name: "shim in any distro beats grub in an earlier one",
			files: map[string]string{"EFI/aaa/" + grubName: "g", "EFI/redhat/" + shimName: "s"},
			want:  `\EFI\redhat\` + shimName},
		{name: "removable path only",
			files: map[string]string{"EFI/BOOT/" + removableName: "b", "EFI/BOOT/fbx64.efi": "f"},
			want:  `\EFI\BOOT\` + removableName},
		{name: "case as stored on FAT",
			files: map[string]string{"efi/Boot/" + strings.ToLower(removableName): "b"},
			want:  `\efi\Boot\` + strings.ToLower(removableName)},
		{name: "upper-case shim",
			files: map[string]string{"EFI/centos/" + up(shimName): "s"},
			want:  `\EFI\centos\` + up(shimName)},
		{name: "shim in BOOT is not a distro",
			files: map[string]string{"EFI/BOOT/" + shimName: "s", "EFI/BOOT/" + removableName: "b"},
			want:  `\EFI\BOOT\` + removableName},
		{name: "first distro in sorted order",
			files: map[string]string{"EFI/ubuntu/" + shimName: "s", "EFI/debian/" + shimName: "s"},
			want:  `\EFI\debian\` + shimName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			esp := t.TempDir()
			writeTree(t, esp, tt.files)
			got, err := FindLoader(esp)
			if err != nil || got != tt.want {
				t.Errorf("FindLoader = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFindLoaderErrors(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no EFI dir":                {"loader/loader.conf": "x"},
		"nothing known":             {"EFI/Microsoft/Boot/bootmgfw.efi": "w", "EFI/debian/mmx64.efi": "m"},
		"directory named like shim": {"EFI/debian/" + shimName + "/x": "x"},
	} {
		t.Run(name, func(t *testing.T) {
			esp := t.TempDir()
			writeTree(t, esp, files)
			_, err := FindLoader(esp)
			if !errors.Is(err, ErrNoLoader) {
				t.Errorf("err = %v, want ErrNoLoader", err)
			}
		})
	}
}
