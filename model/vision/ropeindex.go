package vision

import "fmt"

// RopeIndex computes the text model's 3-D rotary positions (M-RoPE) of a
// prompt, as Hugging Face's get_rope_index for Qwen3-VL and Qwen3.5 does
// for images: rows t, h and w of one position per token of ids.
//
// Text tokens at the current position s get s in all three rows, s
// advancing by one per token. An image is the next t*(h/merge)*(w/merge)
// tokens equal to imageTokenID, its grid the next of grids (in patches, as
// given to Encode): its tokens, row-major over (frame, merged row, merged
// column), get s+frame, s+row and s+column, then s advances by
// max(h, w)/merge. ropeDelta is max(position)+1-len(ids): while decoding,
// the token at cache index i has position i+ropeDelta in all three rows.
// A prompt without images has positions 0..len(ids)-1 and delta 0.
//
// Images are found by their pads: an image's first pad must follow
// visionStartID or the previous image's last pad (images whose pads touch
// are split by their grids); a negative visionStartID skips that check.
// The error reports pads left over or missing for the grids, a bad grid or
// merge size, and an image not opened by visionStartID. Video pads are
// text here.
func RopeIndex(ids []int, imageTokenID, visionStartID int, grids [][3]int, merge int) (positions [3][]int, ropeDelta int, err error) {
	if merge <= 0 {
		return positions, 0, fmt.Errorf("vision: rope index: merge size %d, want a positive size", merge)
	}
	for r := range positions {
		positions[r] = make([]int, len(ids))
	}
	s, img, maxPos := 0, 0, -1
	prevImageEnd := -1
	for i := 0; i < len(ids); {
		if ids[i] != imageTokenID {
			for r := range positions {
				positions[r][i] = s
			}
			maxPos = max(maxPos, s)
			s++
			i++
			continue
		}
		if img >= len(grids) {
			return [3][]int{}, 0, fmt.Errorf("vision: rope index: image pad at %d beyond the %d images of grids", i, len(grids))
		}
		if visionStartID >= 0 && i != prevImageEnd && (i == 0 || ids[i-1] != visionStartID) {
			return [3][]int{}, 0, fmt.Errorf("vision: rope index: image %d at %d does not follow a vision start token (%d)", img, i, visionStartID)
		}
		g := grids[img]
		if g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1]%merge != 0 || g[2]%merge != 0 {
			return [3][]int{}, 0, fmt.Errorf("vision: rope index: image %d: grid %v: %w (merge %d)", img, g, ErrBadGrid, merge)
		}
		gt, gh, gw := g[0], g[1]/merge, g[2]/merge
		if gt > len(ids) || gh > len(ids) || gw > len(ids) || gt*gh > len(ids) || gt*gh*gw > len(ids)-i {
			return [3][]int{}, 0, fmt.Errorf("vision: rope index: image %d at %d: grid %v needs more pads than the %d tokens left", img, i, g, len(ids)-i)
		}
		n := gt * gh * gw
		for k := range n {
			if ids[i+k] != imageTokenID {
				return [3][]int{}, 0, fmt.Errorf("vision: rope index: image %d at %d: grid %v needs %d pads, found %d", img, i, g, n, k)
			}
			f, r, c := k/(gh*gw), k/gw%gh, k%gw
			positions[0][i+k] = s + f
			positions[1][i+k] = s + r
			positions[2][i+k] = s + c
			maxPos = max(maxPos, s+f, s+r, s+c)
		}
		s += max(gh, gw)
		i += n
		prevImageEnd = i
		img++
	}
	if img != len(grids) {
		return [3][]int{}, 0, fmt.Errorf("vision: rope index: %d grids for %d images in the prompt", len(grids), img)
	}
	return positions, maxPos + 1 - len(ids), nil
}

// ExpandPads returns ids with its i-th image pad (imageTokenID) repeated
// for the tokens of image i, whose grid in patches is grids[i]; the index
// in the result where each image's tokens start; and their 3-D positions,
// one (t, h, w) per token, and rope delta (RopeIndex). The number of pads
// must be the number of grids.
func ExpandPads(ids []int, imageTokenID, visionStartID int, grids [][3]int, merge int) (expanded, starts []int, positions [][3]int, ropeDelta int, err error) {
	if merge <= 0 {
		return nil, nil, nil, 0, fmt.Errorf("vision: merge size %d", merge)
	}
	total := len(ids)
	for _, g := range grids {
		total += g[0]*g[1]*g[2]/(merge*merge) - 1
	}
	expanded = make([]int, 0, max(total, 0))
	for _, id := range ids {
		if id != imageTokenID {
			expanded = append(expanded, id)
			continue
		}
		if len(starts) == len(grids) {
			return nil, nil, nil, 0, fmt.Errorf("vision: the prompt holds more image pads than the %d images", len(grids))
		}
		g := grids[len(starts)]
		starts = append(starts, len(expanded))
		for range g[0] * g[1] * g[2] / (merge * merge) {
			expanded = append(expanded, id)
		}
	}
	if len(starts) != len(grids) {
		return nil, nil, nil, 0, fmt.Errorf("vision: the prompt holds %d image pads for %d images", len(starts), len(grids))
	}
	pos, delta, err := RopeIndex(expanded, imageTokenID, visionStartID, grids, merge)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	positions = make([][3]int, len(expanded))
	for i := range expanded {
		positions[i] = [3]int{pos[0][i], pos[1][i], pos[2][i]}
	}
	return expanded, starts, positions, delta, nil
}
