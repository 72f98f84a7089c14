package vision

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/safetensors"
)

// ErrNoTower is wrapped by Resolve's error for a model without a vision
// tower (the caller decides whether that is an error).
var ErrNoTower = errors.New("no vision tower")

// Special tokens of Qwen3.5's vocabulary that Resolve looks up for models
// whose config.json does not give their ids (GGUF models).
const (
	ImagePadToken    = "<|image_pad|>"
	VisionStartToken = "<|vision_start|>"
)

// Setup is what prompts with images need of a model: where its tower is,
// the image preprocessing and the special ids.
type Setup struct {
	// MMProj is the mmproj GGUF file holding the tower, or empty when the
	// tower is the checkpoint directory Dir's.
	MMProj string
	// Dir is the checkpoint directory (when MMProj is empty).
	Dir string
	// Config is the tower's hyperparameters.
	Config *Config
	// Processor is the image preprocessing.
	Processor imageproc.Config
	// ImageToken is the image pad id; VisionStart the id of the token
	// before an image's pads, or -1.
	ImageToken, VisionStart int
}

// ResolveOptions configures Resolve.
type ResolveOptions struct {
	// MMProj, when set, is the mmproj GGUF file to take the tower from,
	// for a GGUF model or in place of a checkpoint's own tower.
	MMProj string
	// TokenID looks a token up in the model's vocabulary (nil when the
	// model has no tokenizer): the special ids of models whose config.json
	// does not give them.
	TokenID func(string) (int, bool)
	// TextHidden, when positive, is the text model's hidden size, which
	// the tower's output width must be.
	TextHidden int
}

// Resolve says where the vision tower of the model at path (a checkpoint
// directory or a GGUF model) comes from and what its images need:
//
//   - with o.MMProj, the tower, its config and the preprocessing are the
//     mmproj file's (ReadMMProj); the pixel bounds, where the file has
//     none, are those of the checkpoint's preprocessor_config.json when
//     path is a checkpoint directory, else Qwen3.5's; the special ids are
//     config.json's image_token_id and vision_start_token_id where it has
//     them, else the tokens ImagePadToken and VisionStartToken of the
//     model's vocabulary;
//   - without, a checkpoint directory's own tower (config.json's
//     vision_config, its visual.* tensors, preprocessor_config.json);
//     a GGUF model has none (its tower is in a separate mmproj file).
//
// A model without a tower gives an error wrapping ErrNoTower.
func Resolve(path string, o ResolveOptions) (*Setup, error) {
	_, isGGUF, err := gguf.Locate(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("vision: %w", err)
	}
	dir := ""
	if !isGGUF {
		if st, err := os.Stat(filepath.Join(path, "config.json")); err == nil && !st.IsDir() {
			dir = path
		}
	}
	var s *Setup
	if o.MMProj != "" {
		s, err = resolveMMProj(dir, o)
	} else {
		s, err = resolveCheckpoint(path, dir, isGGUF)
	}
	if err != nil {
		return nil, err
	}
	if err := checkWidth(s, o.TextHidden); err != nil {
		return nil, err
	}
	return s, nil
}

// checkWidth checks that the tower's output is hidden wide (when
// positive).
func checkWidth(s *Setup, hidden int) error {
	if hidden <= 0 || s.Config.OutHiddenSize == hidden {
		return nil
	}
	if s.MMProj != "" {
		return fmt.Errorf("vision: mmproj %s: its projection_dim %d is not the text model's hidden size %d (the projector of another model?)", s.MMProj, s.Config.OutHiddenSize, hidden)
	}
	return fmt.Errorf("vision: the tower's out_hidden_size %d is not the text model's hidden size %d", s.Config.OutHiddenSize, hidden)
}

// specialIDs are config.json's image ids.
type specialIDs struct {
	ImageTokenID       *int `json:"image_token_id"`
	VisionStartTokenID *int `json:"vision_start_token_id"`
}

// readSpecialIDs reads the ids of the checkpoint directory dir's
// config.json.
func readSpecialIDs(dir string) (specialIDs, error) {
	var ids specialIDs
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ids, fmt.Errorf("vision: %w", err)
	}
	if err := json.Unmarshal(data, &ids); err != nil {
		return ids, fmt.Errorf("vision: config.json: %w", err)
	}
	return ids, nil
}

// resolveCheckpoint resolves the own tower of the model at path.
func resolveCheckpoint(path, dir string, isGGUF bool) (*Setup, error) {
	if isGGUF {
		return nil, fmt.Errorf("vision: %s: %w: a GGUF model's vision tower is in a separate mmproj file", path, ErrNoTower)
	}
	if dir == "" {
		return nil, fmt.Errorf("vision: %s: %w (no config.json)", path, ErrNoTower)
	}
	cfg, ok, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("vision: the model at %s has %w (no vision_config in its config.json)", dir, ErrNoTower)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	_, err = detectPrefix(ck)
	ck.Close()
	if err != nil {
		// Text-only exports of a multimodal checkpoint keep its
		// vision_config but not the tower's weights.
		return nil, fmt.Errorf("vision: the model at %s has %w (no visual.* tensors)", dir, ErrNoTower)
	}
	ids, err := readSpecialIDs(dir)
	if err != nil {
		return nil, err
	}
	if ids.ImageTokenID == nil {
		return nil, errors.New("vision: config.json has a vision_config but no image_token_id")
	}
	proc, err := imageproc.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("vision: %w", err)
	}
	s := &Setup{Dir: dir, Config: cfg, Processor: proc, ImageToken: *ids.ImageTokenID, VisionStart: -1}
	if ids.VisionStartTokenID != nil {
		s.VisionStart = *ids.VisionStartTokenID
	}
	return s, nil
}

// resolveMMProj resolves the tower of the mmproj file o.MMProj for the
// model whose checkpoint directory is dir ("" for a GGUF model).
func resolveMMProj(dir string, o ResolveOptions) (*Setup, error) {
	info, err := ReadMMProj(o.MMProj)
	if err != nil {
		return nil, err
	}
	s := &Setup{MMProj: o.MMProj, Config: info.Config, Processor: info.Processor, ImageToken: -1, VisionStart: -1}
	if err := checkWidth(s, o.TextHidden); err != nil {
		return nil, err
	}
	if dir != "" {
		if !info.PixelBounds {
			if _, err := os.Stat(filepath.Join(dir, "preprocessor_config.json")); err == nil {
				p, err := imageproc.LoadConfig(dir)
				if err != nil {
					return nil, fmt.Errorf("vision: %w", err)
				}
				s.Processor.MinPixels, s.Processor.MaxPixels = p.MinPixels, p.MaxPixels
				if err := s.Processor.Validate(); err != nil {
					return nil, fmt.Errorf("vision: %w", err)
				}
			}
		}
		ids, err := readSpecialIDs(dir)
		if err != nil {
			return nil, err
		}
		if ids.ImageTokenID != nil {
			s.ImageToken = *ids.ImageTokenID
			if ids.VisionStartTokenID != nil {
				s.VisionStart = *ids.VisionStartTokenID
			}
			return s, nil
		}
	}
	if o.TokenID == nil {
		return nil, fmt.Errorf("vision: the model has no tokenizer to find %s in (the image pad token)", ImagePadToken)
	}
	id, ok := o.TokenID(ImagePadToken)
	if !ok {
		return nil, fmt.Errorf("vision: the model's vocabulary has no %s token (the image pad): not a Qwen3.5 vocabulary", ImagePadToken)
	}
	s.ImageToken = id
	if id, ok := o.TokenID(VisionStartToken); ok {
		s.VisionStart = id
	}
	return s, nil
}

// Open loads the tower the setup names.
func (s *Setup) Open(o Options) (*Tower, error) {
	if s.MMProj != "" {
		return OpenGGUF(s.MMProj, o)
	}
	return Open(s.Dir, o)
}
