package knowledge_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	d := knowledge.Config{}.WithDefaults()
	require.Equal(t, knowledge.DefaultScoreFloor, d.ScoreFloor)
	require.Equal(t, knowledge.DefaultPacksDir, d.PacksDir)
	require.Equal(t, knowledge.DefaultLanguage, d.Language)
	require.Equal(t, knowledge.DefaultChunkSize, d.ChunkSize)
	require.Equal(t, knowledge.DefaultIndexTimeout, d.IndexTimeout)
	require.Equal(t, knowledge.DefaultEmbedBatch, d.Embeddings.BatchSize)
	require.NoError(t, d.Validate())
	require.NoError(t, knowledge.Config{}.Validate(), "the zero config is valid (defaults)")
	for _, tc := range []struct {
		cfg  knowledge.Config
		want string
	}{
		{knowledge.Config{ScoreFloor: -0.1}, "knowledge.score_floor"},
		{knowledge.Config{ChunkSize: knowledge.MaxChunkSize + 1}, "knowledge.chunk_size"},
		{knowledge.Config{Candidates: -1}, "knowledge.candidates"},
		{knowledge.Config{Language: "English"}, "knowledge.language"},
		{knowledge.Config{Embeddings: knowledge.EmbeddingsConfig{Endpoint: "localhost:8080", Model: "m"}}, "knowledge.embeddings.endpoint"},
		{knowledge.Config{Embeddings: knowledge.EmbeddingsConfig{Weight: 2}}, "knowledge.embeddings.weight"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}
