package limits

import (
	"strings"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// The table agrees with a map under any sequence of inserts, lookups,
// removals and sweeps, with hashes drawn from a few values so that keys
// collide, clusters form and probes wrap around the end of the slots; a
// sweep that removes as it goes visits every key.
func TestPropertyTable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type key struct{ res, dom string }
		hashes := map[key]uint64{}
		hashOf := func(k key) uint64 {
			if h, ok := hashes[k]; ok {
				return h
			}
			// A few hashes, spread over the top bits (which pick the home
			// slot) so that homes fall at the end of the table too.
			h := rapid.Uint64Range(0, 7).Draw(t, "hash")<<61 | 1
			hashes[k] = h
			return h
		}
		genKey := rapid.Custom(func(t *rapid.T) key {
			dom := rapid.SampledFrom([]string{"", "a", "b", "user-1", strings.Repeat("x", inlineDomain), strings.Repeat("y", inlineDomain+1), strings.Repeat("z", 40)}).Draw(t, "domain")
			return key{rapid.SampledFrom([]string{"r", "s", ""}).Draw(t, "resource"), dom}
		})
		var tb table
		model := map[key]int64{}
		for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
			k := genKey.Draw(t, "key")
			h := hashOf(k)
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1: // insert or update
				b := tb.find(h, k.res, k.dom)
				if (b != nil) != (model[k] != 0) {
					t.Fatalf("op %d: find %v says %v, model %v", i, k, b != nil, model[k])
				}
				if b == nil {
					b = tb.insert(h, k.res, k.dom)
				}
				b.last = int64(i + 1)
				model[k] = int64(i + 1)
			case 2: // remove one
				found := false
				for j := range tb.slots {
					s := &tb.slots[j]
					if s.hash != 0 && s.matches(h, k.res, k.dom) {
						tb.removeAt(j)
						found = true
						break
					}
				}
				if found != (model[k] != 0) {
					t.Fatalf("op %d: remove %v found %v, model %v", i, k, found, model[k])
				}
				delete(model, k)
			case 3: // sweep, removing the keys of one resource
				res := rapid.SampledFrom([]string{"r", "s", ""}).Draw(t, "sweep resource")
				seen := map[key]bool{}
				for j := 0; j < len(tb.slots); {
					s := &tb.slots[j]
					if s.hash == 0 {
						j++
						continue
					}
					sk := key{s.res, s.domain()}
					seen[sk] = true
					if s.res != res {
						j++
						continue
					}
					delete(model, sk)
					tb.removeAt(j)
				}
				for mk := range model {
					if mk.res != res && !seen[mk] {
						t.Fatalf("op %d: the sweep missed %v", i, mk)
					}
				}
			}
			if tb.n != len(model) {
				t.Fatalf("op %d: %d slots used, model %d", i, tb.n, len(model))
			}
			for mk, v := range model {
				b := tb.find(hashOf(mk), mk.res, mk.dom)
				if b == nil || b.last != v {
					t.Fatalf("op %d: %v lost (%v)", i, mk, b)
				}
			}
		}
	})
}

func TestSlotSize(t *testing.T) {
	if sizeofSlot != 104 {
		t.Fatalf("a slot is %d bytes; the documentation says 104", sizeofSlot)
	}
}

func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(memShard{}); n != 128 {
		t.Fatalf("a shard is %d bytes, want 128 (no false sharing)", n)
	}
}
