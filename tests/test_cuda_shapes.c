// llmc/cuda_shapes.h: the shapes the trainer lets onto the GPU are those its kernels take (every
// fresh dN and GPT-2 124M at the lengths people train), and each shape they cannot take is refused
// naming what to change. Plain C: the check needs no GPU.
#include <string.h>
#include "llmc/cuda_shapes.h"
#include "tdpipe/run_model.h"
#include "tests/test.h"

// 1 when (C, NH, Vp, T) is refused with a reason that contains `names`
static int refused(int C, int NH, int Vp, int T, const char* names) {
    char why[256] = "";
    int bad = cuda_shapes_check(C, NH, Vp, T, why, sizeof why);
    printf("     C %d NH %d Vp %d T %d: %s\n", C, NH, Vp, T, bad ? why : "taken");
    return bad && strstr(why, names) != NULL;
}

int main(void) {
    char why[256], err[256];
    int all_ok = 1;
    for (int d = 1; d <= 12; d++) { // the trainer's fresh models, on GPT-2's vocabulary and on bytes
        const int vocabs[2] = {50257, 256};
        for (int v = 0; v < 2; v++) {
            char name[16];
            snprintf(name, sizeof name, "d%d", d);
            GPT2Config c;
            memset(&c, 0, sizeof c);
            if (run_model_fresh_config(name, vocabs[v], &c, err, sizeof err) != 1) {
                all_ok = 0;
                printf("     %s: %s\n", name, err);
                continue;
            }
            const int Ts[3] = {8, 64, 1024};
            for (int t = 0; t < 3; t++)
                if (Ts[t] <= c.max_seq_len && cuda_shapes_check(c.channels, c.num_heads, c.padded_vocab_size, Ts[t], why, sizeof why)) {
                    all_ok = 0;
                    printf("     %s V %d T %d: %s\n", name, vocabs[v], Ts[t], why);
                }
        }
    }
    CHECK(all_ok, "every fresh d1..d12 (V 50257 and 256) is taken at T 8, 64 and 1024");
    CHECK(!cuda_shapes_check(768, 12, 50304, 1024, why, sizeof why), "GPT-2 124M's shape at T 1024 is taken");
    CHECK(!cuda_shapes_check(2048, 16, 50304, 8, why, sizeof why) && !cuda_shapes_check(512, 2, 128, 16, why, sizeof why),
          "the edges are taken: C 2048 (LayerNorm's most), head size 128 and 256 (attention's most), T 8");
    CHECK(refused(768, 12, 50304, 100, "-t 100"), "-t 100 refused, naming -t (a sample's 1 x T rows: B 4 x T 100 alone would pass the matmul)");
    CHECK(refused(768, 12, 50304, 12, "-t 12"), "-t 12 refused, naming -t");
    CHECK(refused(100, 2, 50304, 64, "C = 100"), "C 100 (not a multiple of 8) refused, naming C");
    CHECK(refused(4096, 32, 50304, 64, "C = 4096"), "C 4096 (over LayerNorm's 2048) refused, naming C");
    CHECK(refused(768, 16, 50304, 64, "768/16"), "head size 48 (not a multiple of 32) refused, naming C/NH");
    CHECK(refused(1024, 2, 50304, 64, "1024/2"), "head size 512 (over 256) refused, naming C/NH");
    CHECK(refused(768, 7, 50304, 64, "768/7"), "C not a multiple of NH refused, naming C/NH");
    CHECK(refused(768, 0, 50304, 64, "768/0"), "NH 0 refused, naming C/NH");
    CHECK(refused(768, 12, 50257, 64, "Vp = 50257"), "an unpadded Vp 50257 refused, naming Vp");
    return test_summary();
}
