package image

func isOCI(s string) bool { return false }
