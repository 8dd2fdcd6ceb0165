package main

import "strings"

// naturalCompare orders strings as people read them: runs of digits by
// their numeric value, so batch-2 comes before batch-10; the rest byte by
// byte. Equal numbers with different leading zeros fall back to the text.
func naturalCompare(a, b string) int {
	ia, ib := 0, 0
	for ia < len(a) && ib < len(b) {
		ca, cb := a[ia], b[ib]
		if isDigit(ca) && isDigit(cb) {
			ea, eb := digitsEnd(a, ia), digitsEnd(b, ib)
			na := strings.TrimLeft(a[ia:ea], "0")
			nb := strings.TrimLeft(b[ib:eb], "0")
			if len(na) != len(nb) {
				return compareInt(len(na), len(nb))
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			ia, ib = ea, eb
			continue
		}
		if ca != cb {
			return compareInt(int(ca), int(cb))
		}
		ia++
		ib++
	}
	if c := compareInt(len(a)-ia, len(b)-ib); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
