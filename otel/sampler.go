package correxotel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The sampler variables, read from the real process environment as the SDK
// reads them.
const (
	envTracesSampler    = "OTEL_TRACES_SAMPLER"
	envTracesSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
)

// samplerFromEnv builds the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG select, exactly as the SDK's TracerProvider would
// (go.opentelemetry.io/otel/sdk/trace, sampler_env.go): the same names, the
// same default (parentbased_always_on), the same fallbacks (an unusable
// ratio samples everything, an unknown name gives the default), each
// problem reported through otel.Handle as the SDK reports it rather than
// failing Setup.
//
// Setup hands the result to the TracerProvider (sdktrace.WithSampler) and
// to LifecycleSpans, so that spans made through the SDK and lifecycle spans
// built without it are sampled by one and the same sampler: the provider
// keeps its own private, and reading the environment here is the only way
// to share it. TestSamplerFromEnvironment pins the behaviour.
func samplerFromEnv(getenv func(string) string) sdktrace.Sampler {
	s, err := parseSampler(getenv(envTracesSampler), getenv(envTracesSamplerArg))
	if err != nil {
		otel.Handle(err)
	}
	return s
}

// errSamplerArg is an OTEL_TRACES_SAMPLER_ARG that is not a ratio in [0, 1].
var errSamplerArg = errors.New("invalid " + envTracesSamplerArg)

func parseSampler(name, arg string) (sdktrace.Sampler, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	arg = strings.TrimSpace(arg)
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return parseRatio(arg)
	case "parentbased_traceidratio":
		ratio, err := parseRatio(arg)
		return sdktrace.ParentBased(ratio), err
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample()), fmt.Errorf("unsupported sampler: %s", name)
}

// parseRatio reads a TraceIDRatioBased argument; an empty one is 1.
func parseRatio(arg string) (sdktrace.Sampler, error) {
	if arg == "" {
		return sdktrace.TraceIDRatioBased(1), nil
	}
	v, err := strconv.ParseFloat(arg, 64)
	switch {
	case err != nil:
		return sdktrace.TraceIDRatioBased(1), fmt.Errorf("%w %q: %w", errSamplerArg, arg, err)
	case v < 0 || v > 1:
		return sdktrace.TraceIDRatioBased(1), fmt.Errorf("%w %q: not within [0, 1]", errSamplerArg, arg)
	}
	return sdktrace.TraceIDRatioBased(v), nil
}
