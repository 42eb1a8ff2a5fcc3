package kmod

// Match reports whether s matches the shell glob pattern as fnmatch(3)
// without flags does, which is what modprobe uses for modules.alias:
// '*' matches any run of characters (including '/'), '?' any one character,
// '[...]' a set with ranges, negated by a leading '!' or '^'; '\' quotes the
// next character. A malformed set ("[" without "]") matches a literal '['.
func Match(pattern, s string) bool {
	// Iterative matcher with single backtrack point for '*'.
	px, sx := 0, 0
	starP, starS := -1, -1
	for sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				px++
				sx++
				continue
			case '[':
				if ok, n, valid := matchSet(pattern[px:], s[sx]); valid {
					if ok {
						px += n
						sx++
						continue
					}
				} else if s[sx] == '[' {
					px++
					sx++
					continue
				}
			case '\\':
				if px+1 < len(pattern) && pattern[px+1] == s[sx] {
					px += 2
					sx++
					continue
				}
			default:
				if c == s[sx] {
					px++
					sx++
					continue
				}
			}
		}
		if starP >= 0 {
			starS++
			px, sx = starP+1, starS
			continue
		}
		return false
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// matchSet matches c against the set at the start of p ("[...]"). It
// returns whether c is in the set, the length of the set expression, and
// whether the expression is well formed.
func matchSet(p string, c byte) (matched bool, n int, valid bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		lo := p[i]
		if lo == '\\' && i+1 < len(p) {
			i++
			lo = p[i]
		}
		i++
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi = p[i+1]
			if hi == '\\' && i+2 < len(p) {
				i++
				hi = p[i+1]
			}
			i += 2
		}
		if lo <= c && c <= hi {
			matched = true
		}
	}
	return false, 0, false
}
