package api

// AgentBoot is bootyd's answer to GET /v1/agent/boot: where booty's agent
// kernel and initramfs are (the files its iPXE scripts boot), their sizes
// and SHA-256 digests, and the kernel arguments bootyd boots them with.
// `booty takeover` downloads both, verifies them against it and kexecs
// into them with booty.server= and Cmdline. The route needs no token: it
// tells what /files/ serves to anyone.
type AgentBoot struct {
	Kernel BootFile `json:"kernel"`
	Initrd BootFile `json:"initrd"`
	// Cmdline is appended to booty.server=URL on the kernel command line,
	// e.g. "console=tty0 console=ttyS0,115200n8".
	Cmdline string `json:"cmdline"`
}

// BootFile is one file of AgentBoot.
type BootFile struct {
	// URL is absolute when bootyd has a public URL, else a path
	// ("/files/vmlinuz") relative to the server that answered.
	URL string `json:"url"`
	// SHA256 is the file's digest, 64 lowercase hex digits.
	SHA256 string `json:"sha256"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
}
