package script

import (
	"strings"
)

// clusterSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first "{" and the next "}", when not
// empty) or of the whole key, modulo 16384, as Redis computes it.
func ClusterSlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
