// Fixture: the KvSeq the field rule reads (this fixture's engine file names none of it).
#pragma once

struct KvSeq {
    int kv = 0;
};
