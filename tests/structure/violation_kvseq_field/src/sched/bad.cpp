// Fixture: the scheduler reading KvSeq's fields (line 9) instead of asking its questions.
#include "kv/kv_manager.h"

struct Pool {
    int total() const { return 0; }
};

int bad(const KvSeq &seq, const KvSeq *other, const Pool *kv_) {
    int n = seq.host.phase + int(other->n_offloaded);
    // Not violations: questions (calls), another identifier (kv_), comments (seq.kv), strings.
    const char *text = "seq.kv";
    return n + int(seq.n_tokens()) + int(other->offloaded_blocks()) + kv_->total() + text[0];
}
