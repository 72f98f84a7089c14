// Package imageproc turns image files into the input of Qwen3.5's vision
// tower, reproducing Hugging Face's Qwen2-VL/Qwen3-VL image processor (the
// PIL-backed "slow" processor, which the goldens in testdata/models/vl-tiny
// were made with) as exactly as Go allows.
//
// The pipeline is:
//
//  1. [Decode]: PNG, JPEG, GIF (first frame) and WebP bytes to 8-bit RGB, the
//     way HF's load_image + convert_to_rgb does with Pillow: EXIF orientation
//     applied (JPEG), greyscale replicated, alpha composited on white with
//     Pillow's integer alpha_composite, 16-bit PNG samples reduced as Pillow
//     reduces them. Files declaring more than [MaxDecodePixels] pixels are
//     refused before their pixel data is decoded.
//  2. [Config.SmartResize]: the target size, a multiple of patch*merge with a
//     pixel count between MinPixels and MaxPixels (HF's smart_resize).
//  3. [ResizeBicubic]: Pillow's BICUBIC resampling (ImagingResample), bit for
//     bit on uint8.
//  4. [Config.Process]: rescale by 1/255, normalize with the mean and std,
//     repeat the frame temporal_patch_size times and lay the patches out in
//     the processor's order (merge blocks contiguous), giving pixel_values
//     [patches, 3*tp*ps*ps] and the grid (t, h, w).
//
// Errors caused by the input (unknown format, corrupt data, too many pixels,
// extreme aspect ratio) wrap one of the sentinel errors [ErrFormat],
// [ErrCorrupt], [ErrTooLarge] and [ErrAspectRatio]; [IsInputError] reports
// whether an error is one of them, so that a server can answer 400.
package imageproc
