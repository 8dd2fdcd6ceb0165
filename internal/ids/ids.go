// Package ids makes the random identifiers Slackline hands out (agent,
// framework, session, stream, container and status-update ids).
package ids

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns a random version-4 UUID in its text form.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux.
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// NewHex returns 128 random bits as 32 hex digits (no dashes), for ids
// that must be plain [0-9a-f] such as container ids.
func NewHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
