package runnerapi

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MaxPoolImages bounds a pool's list of images.
const MaxPoolImages = 32

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParsePoolImage splits a pool's image into the reference jobs name and
// the digest it is pinned to ("" when it is not): REFERENCE or
// REFERENCE@sha256:HEX.
func ParsePoolImage(image string) (ref, digest string, err error) {
	ref, digest, pinned := strings.Cut(image, "@")
	if err := CheckImage(ref); err != nil {
		return "", "", err
	}
	if pinned && !sha256Digest.MatchString(digest) {
		return "", "", fmt.Errorf("image %q: a pin is @sha256: and 64 lower-case hex digits", image)
	}
	return ref, digest, nil
}

// Image states a runner reports.
const (
	ImagePulling  = "PULLING"
	ImagePulled   = "PULLED"
	ImageFailed   = "FAILED"
	ImageMismatch = "MISMATCH" // pulled, but not the digest the pool pins
)

// ImageState is what a runner has of one of its pool's images.
type ImageState struct {
	// Image is as the pool lists it (a reference, maybe pinned).
	Image string `json:"image"`
	State string `json:"state"`
	// Digest is the digest of the image the runner has ("" before a pull).
	Digest string `json:"digest,omitempty"`
	// Error says why a pull failed or the digest does not match.
	Error string `json:"error,omitempty"`
	// Progress is the pull's last progress line while it is PULLING
	// (podman's: "Copying blob sha256:…", "Writing manifest…").
	Progress string    `json:"progress,omitempty"`
	At       time.Time `json:"at"`
}

// checkImages refuses image states no agent could report.
func checkImages(images []ImageState) error {
	if len(images) > MaxPoolImages {
		return fmt.Errorf("images: more than %d", MaxPoolImages)
	}
	for i, im := range images {
		switch im.State {
		case ImagePulling, ImagePulled, ImageFailed, ImageMismatch:
		default:
			return fmt.Errorf("images[%d].state: %q is not a state", i, im.State)
		}
		if err := checkTexts(fmt.Sprintf("images[%d].", i), textField{"image", im.Image, 600}, textField{"digest", im.Digest, 80},
			textField{"error", im.Error, 512}, textField{"progress", im.Progress, 300}); err != nil {
			return err
		}
	}
	return nil
}
