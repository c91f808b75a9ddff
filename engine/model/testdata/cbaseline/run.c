// A plain C Llama decoder with OpenMP: the baseline that engine/model's BenchmarkCBaseline compares the engine
// with (issue 4: "against a plain C implementation with OpenMP on 2 cores"). It reads llama2.c checkpoints of
// version 0 (float32) and version 2 (int8 groups, each with a float32 scale; activations quantized the same way
// as they are used, integer dot products a group), the two that llama2.c's run.c and runq.c read, and decodes
// greedily from BOS. Every matmul is a loop over output rows split across threads, the inner dot product left
// to the compiler, as those programs do.
//
//	cc -Ofast -march=native -fopenmp run.c -lm -o run
//	OMP_NUM_THREADS=2 ./run model.bin 200     the generated ids, then "tok/s R" over steps 2..200
//	./run model.bin 1 logits                  the logits of the first step (BOS at position 0), one a line
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
} Config;

typedef struct { // a matrix of int8 groups: q[n] and one scale a group
	int8_t *q;
	float *s;
} QTensor;

static Config c;
static int gs;                                      // group size (version 2), 0 for float32
static float *emb, *rms_att, *rms_ffn, *rms_final; // float32 in both versions (emb: version 0)
static float *wq, *wk, *wv, *wo, *w1, *w2, *w3, *wcls;
static QTensor qemb, *qwq, *qwk, *qwv, *qwo, *qw1, *qw2, *qw3, qcls;

static void fail(const char *msg) {
	fprintf(stderr, "run: %s\n", msg);
	exit(1);
}

// qtensors points n tensors of size elements each at p, one after another, and returns the end.
static char *qtensors(QTensor *t, int n, long size, char *p) {
	for (int i = 0; i < n; i++) {
		t[i].q = (int8_t *)p;
		p += size;
		t[i].s = (float *)p;
		p += size / gs * sizeof(float);
	}
	return p;
}

static void load(const char *path) {
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) fail("cannot open the checkpoint");
	char *data = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (data == MAP_FAILED) fail("cannot map the checkpoint");
	int shared = 1;
	char *p = data;
	if (*(uint32_t *)data == 0x616b3432) { // "ak42": version 2
		if (*(int *)(data + 4) != 2) fail("only llama2.c versions 0 and 2 are read");
		memcpy(&c, data + 8, sizeof c);
		shared = data[36];
		memcpy(&gs, data + 37, sizeof gs);
		p = data + 256;
	} else {
		memcpy(&c, data, sizeof c);
		shared = c.vocab > 0;
		c.vocab = abs(c.vocab);
		p = data + sizeof c;
	}
	long dim = c.dim, kv = (long)c.dim / c.heads * c.kv_heads, hid = c.hidden, L = c.layers;
	if (gs == 0) {
		float *f = (float *)p;
		emb = f, f += c.vocab * dim;
		rms_att = f, f += L * dim;
		wq = f, f += L * dim * dim;
		wk = f, f += L * kv * dim;
		wv = f, f += L * kv * dim;
		wo = f, f += L * dim * dim;
		rms_ffn = f, f += L * dim;
		w1 = f, f += L * hid * dim;
		w2 = f, f += L * dim * hid;
		w3 = f, f += L * hid * dim;
		rms_final = f, f += dim;
		f += (long)c.seq_len * (dim / c.heads); // the two RoPE tables, unused
		wcls = shared ? emb : f;
		return;
	}
	float *f = (float *)p;
	rms_att = f, f += L * dim;
	rms_ffn = f, f += L * dim;
	rms_final = f, f += dim;
	p = (char *)f;
	qwq = malloc(7 * L * sizeof(QTensor));
	qwk = qwq + L, qwv = qwk + L, qwo = qwv + L, qw1 = qwo + L, qw2 = qw1 + L, qw3 = qw2 + L;
	p = qtensors(&qemb, 1, c.vocab * dim, p);
	p = qtensors(qwq, L, dim * dim, p);
	p = qtensors(qwk, L, kv * dim, p);
	p = qtensors(qwv, L, kv * dim, p);
	p = qtensors(qwo, L, dim * dim, p);
	p = qtensors(qw1, L, hid * dim, p);
	p = qtensors(qw2, L, dim * hid, p);
	p = qtensors(qw3, L, hid * dim, p);
	qcls = qemb;
	if (!shared) qtensors(&qcls, 1, c.vocab * dim, p);
}

static void rmsnorm(float *o, const float *x, const float *w, int n) {
	float ss = 0;
	for (int i = 0; i < n; i++) ss += x[i] * x[i];
	ss = 1.0f / sqrtf(ss / n + 1e-5f);
	for (int i = 0; i < n; i++) o[i] = w[i] * (ss * x[i]);
}

static void softmax(float *x, int n) {
	float m = x[0], sum = 0;
	for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
	for (int i = 0; i < n; i++) sum += x[i] = expf(x[i] - m);
	for (int i = 0; i < n; i++) x[i] /= sum;
}

// matmul sets y = W·x for W [d, n].
static void matmul(float *y, const float *x, const float *w, int n, int d) {
#pragma omp parallel for
	for (int i = 0; i < d; i++) {
		float s = 0;
		for (int j = 0; j < n; j++) s += w[(long)i * n + j] * x[j];
		y[i] = s;
	}
}

// quantize sets xq to x [n] in int8 groups of gs, each scaled by its largest magnitude over 127.
static void quantize(QTensor *xq, const float *x, int n) {
	for (int g = 0; g < n / gs; g++) {
		float m = 0;
		for (int i = 0; i < gs; i++) m = fmaxf(m, fabsf(x[g * gs + i]));
		float s = m / 127.0f;
		xq->s[g] = s;
		for (int i = 0; i < gs; i++) xq->q[g * gs + i] = (int8_t)roundf(s == 0 ? 0 : x[g * gs + i] / s);
	}
}

// qmatmul sets y = W·x for W [d, n] and x in int8 groups: integer sums a group, scaled by both groups' scales.
static void qmatmul(float *y, const QTensor *x, const QTensor *w, int n, int d) {
#pragma omp parallel for
	for (int i = 0; i < d; i++) {
		const int8_t *wr = w->q + (long)i * n;
		const float *ws = w->s + (long)i * n / gs;
		float v = 0;
		for (int g = 0; g < n / gs; g++) {
			int32_t s = 0;
			for (int k = 0; k < gs; k++) s += (int32_t)x->q[g * gs + k] * (int32_t)wr[g * gs + k];
			v += (float)s * ws[g] * x->s[g];
		}
		y[i] = v;
	}
}

// linear sets y = W·x for matrix i of the float32 array w or the int8 tensors qw, whichever the checkpoint has
// (xq: x quantized, for the latter).
static void linear(float *y, const float *x, const QTensor *xq, const float *w, const QTensor *qw, int i, int n,
	int d) {
	if (gs == 0) matmul(y, x, w + (long)i * n * d, n, d);
	else qmatmul(y, xq, qw + i, n, d);
}

static float *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *kcache, *vcache;
static QTensor xq, hq;

// forward runs token at position pos and leaves the logits in logits.
static void forward(int token, int pos) {
	int dim = c.dim, hd = dim / c.heads, kvdim = hd * c.kv_heads, hid = c.hidden;
	if (gs == 0) {
		memcpy(x, emb + (long)token * dim, dim * sizeof *x);
	} else {
		for (int i = 0; i < dim; i++) x[i] = qemb.q[(long)token * dim + i] * qemb.s[((long)token * dim + i) / gs];
	}
	for (int l = 0; l < c.layers; l++) {
		rmsnorm(xb, x, rms_att + l * dim, dim);
		float *k = kcache + ((long)l * c.seq_len + pos) * kvdim, *v = vcache + ((long)l * c.seq_len + pos) * kvdim;
		if (gs) quantize(&xq, xb, dim);
		linear(q, xb, &xq, wq, qwq, l, dim, dim);
		linear(k, xb, &xq, wk, qwk, l, dim, kvdim);
		linear(v, xb, &xq, wv, qwv, l, dim, kvdim);
		for (int i = 0; i < dim; i += 2) { // RoPE on pairs of neighbours, as llama2.c
			float f = 1.0f / powf(10000.0f, (float)(i % hd) / hd), a = pos * f, cs = cosf(a), sn = sinf(a);
			for (int t = 0; t < (i < kvdim ? 2 : 1); t++) {
				float *r = t == 0 ? q : k, r0 = r[i], r1 = r[i + 1];
				r[i] = r0 * cs - r1 * sn;
				r[i + 1] = r0 * sn + r1 * cs;
			}
		}
#pragma omp parallel for
		for (int h = 0; h < c.heads; h++) {
			float *qh = q + h * hd, *a = att + (long)h * c.seq_len, *o = xb + h * hd;
			int g = h / (c.heads / c.kv_heads);
			for (int t = 0; t <= pos; t++) {
				const float *kt = kcache + ((long)l * c.seq_len + t) * kvdim + g * hd;
				float s = 0;
				for (int i = 0; i < hd; i++) s += qh[i] * kt[i];
				a[t] = s / sqrtf(hd);
			}
			softmax(a, pos + 1);
			memset(o, 0, hd * sizeof *o);
			for (int t = 0; t <= pos; t++) {
				const float *vt = vcache + ((long)l * c.seq_len + t) * kvdim + g * hd;
				for (int i = 0; i < hd; i++) o[i] += a[t] * vt[i];
			}
		}
		if (gs) quantize(&xq, xb, dim);
		linear(xb2, xb, &xq, wo, qwo, l, dim, dim);
		for (int i = 0; i < dim; i++) x[i] += xb2[i];
		rmsnorm(xb, x, rms_ffn + l * dim, dim);
		if (gs) quantize(&xq, xb, dim);
		linear(hb, xb, &xq, w1, qw1, l, dim, hid);
		linear(hb2, xb, &xq, w3, qw3, l, dim, hid);
		for (int i = 0; i < hid; i++) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
		if (gs) quantize(&hq, hb, hid);
		linear(xb, hb, &hq, w2, qw2, l, hid, dim);
		for (int i = 0; i < dim; i++) x[i] += xb[i];
	}
	rmsnorm(x, x, rms_final, dim);
	if (gs) quantize(&xq, x, dim);
	linear(logits, x, &xq, wcls, &qcls, 0, dim, c.vocab);
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc < 3) fail("usage: run checkpoint.bin steps [logits]");
	load(argv[1]);
	int steps = atoi(argv[2]), hd = c.dim / c.heads;
	if (steps < 1 || steps > c.seq_len) fail("steps: want 1 to the model's seq_len");
	if (gs && (c.dim % gs || c.hidden % gs)) fail("the group size must divide dim and hidden_dim");
	x = calloc(c.dim, 4), xb = calloc(c.dim, 4), xb2 = calloc(c.dim, 4), q = calloc(c.dim, 4);
	hb = calloc(c.hidden, 4), hb2 = calloc(c.hidden, 4), logits = calloc(c.vocab, 4);
	att = calloc((long)c.heads * c.seq_len, 4);
	kcache = calloc((long)c.layers * c.seq_len * hd * c.kv_heads, 4);
	vcache = calloc((long)c.layers * c.seq_len * hd * c.kv_heads, 4);
	if (gs) {
		xq.q = calloc(c.dim, 1), xq.s = calloc(c.dim / gs, 4);
		hq.q = calloc(c.hidden, 1), hq.s = calloc(c.hidden / gs, 4);
	}
	int token = 1; // BOS
	double start = 0;
	for (int pos = 0; pos < steps; pos++) {
		forward(token, pos);
		if (argc > 3 && strcmp(argv[3], "logits") == 0) {
			for (int i = 0; i < c.vocab; i++) printf("%.9g\n", logits[i]);
			return 0;
		}
		int best = 0;
		for (int i = 1; i < c.vocab; i++) best = logits[i] > logits[best] ? i : best;
		printf("%d ", best);
		token = best;
		if (pos == 0) start = now();
	}
	printf("\ntok/s %f\n", steps > 1 ? (steps - 1) / (now() - start) : 0);
	return 0;
}
