package projstore

import "testing"

// TestClusterSlotHash checks crc16 against the Redis Cluster
// specification's example, and marker tags for slots across the range
// (each takes a search of about 16,384 hashes, so not all of them).
func TestClusterSlotHash(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for slot := 0; slot < 16384; slot += 509 {
		if tag := tagForSlot(slot); int(crc16(tag)%16384) != slot {
			t.Fatalf("tag %q for slot %d", tag, slot)
		}
	}
	if tag := tagForSlot(16383); crc16(tag)%16384 != 16383 {
		t.Fatalf("tag %q for the last slot", tag)
	}
}
