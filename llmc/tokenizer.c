// GPT-2's byte-level BPE and the byte tokenizer (see tokenizer.h): loading encoder.json (a hand-written
// JSON reader) and vocab.bpe, GPT-2's pre-tokenisation regex written out by hand, and BPE merges
// in the order tiktoken applies them, so the ids are tiktoken's.
#define _GNU_SOURCE // memmem
#include "tokenizer.h"
#include "common.h"
#include "rng.h"
#include "shard.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Unicode classes of GPT-2's regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Coverage is complete, not a subset: the tables below are every code point ≥ U+0080 that tiktoken's
// regex engine (Rust regex, Unicode 16.0) classes as \p{L} (letters: Lu Ll Lt Lm Lo) and \p{N}
// (numbers: Nd Nl No), probed from that engine by `dev/data/tiktoken_reference.py --unicode-tables`;
// ASCII is classed in code. So combining marks (Mn, Mc: Devanagari vowel signs, U+0301) are neither
// letters nor numbers, exactly as in tiktoken. \s is Unicode White_Space (listed in cp_class).
// Bytes that are not valid UTF-8 are one "other" character each.
enum { CLS_OTHER, CLS_LETTER, CLS_NUMBER, CLS_SPACE };

static const uint32_t letter_ranges[][2] = { // 675 ranges
    {0xAA, 0xAA}, {0xB5, 0xB5}, {0xBA, 0xBA}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x2C1},
    {0x2C6, 0x2D1}, {0x2E0, 0x2E4}, {0x2EC, 0x2EC}, {0x2EE, 0x2EE}, {0x370, 0x374}, {0x376, 0x377},
    {0x37A, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1},
    {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x559, 0x559}, {0x560, 0x588},
    {0x5D0, 0x5EA}, {0x5EF, 0x5F2}, {0x620, 0x64A}, {0x66E, 0x66F}, {0x671, 0x6D3}, {0x6D5, 0x6D5},
    {0x6E5, 0x6E6}, {0x6EE, 0x6EF}, {0x6FA, 0x6FC}, {0x6FF, 0x6FF}, {0x710, 0x710}, {0x712, 0x72F},
    {0x74D, 0x7A5}, {0x7B1, 0x7B1}, {0x7CA, 0x7EA}, {0x7F4, 0x7F5}, {0x7FA, 0x7FA}, {0x800, 0x815},
    {0x81A, 0x81A}, {0x824, 0x824}, {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86A}, {0x870, 0x887},
    {0x889, 0x88E}, {0x8A0, 0x8C9}, {0x904, 0x939}, {0x93D, 0x93D}, {0x950, 0x950}, {0x958, 0x961},
    {0x971, 0x980}, {0x985, 0x98C}, {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0}, {0x9B2, 0x9B2},
    {0x9B6, 0x9B9}, {0x9BD, 0x9BD}, {0x9CE, 0x9CE}, {0x9DC, 0x9DD}, {0x9DF, 0x9E1}, {0x9F0, 0x9F1},
    {0x9FC, 0x9FC}, {0xA05, 0xA0A}, {0xA0F, 0xA10}, {0xA13, 0xA28}, {0xA2A, 0xA30}, {0xA32, 0xA33},
    {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA59, 0xA5C}, {0xA5E, 0xA5E}, {0xA72, 0xA74}, {0xA85, 0xA8D},
    {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0}, {0xAB2, 0xAB3}, {0xAB5, 0xAB9}, {0xABD, 0xABD},
    {0xAD0, 0xAD0}, {0xAE0, 0xAE1}, {0xAF9, 0xAF9}, {0xB05, 0xB0C}, {0xB0F, 0xB10}, {0xB13, 0xB28},
    {0xB2A, 0xB30}, {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3D, 0xB3D}, {0xB5C, 0xB5D}, {0xB5F, 0xB61},
    {0xB71, 0xB71}, {0xB83, 0xB83}, {0xB85, 0xB8A}, {0xB8E, 0xB90}, {0xB92, 0xB95}, {0xB99, 0xB9A},
    {0xB9C, 0xB9C}, {0xB9E, 0xB9F}, {0xBA3, 0xBA4}, {0xBA8, 0xBAA}, {0xBAE, 0xBB9}, {0xBD0, 0xBD0},
    {0xC05, 0xC0C}, {0xC0E, 0xC10}, {0xC12, 0xC28}, {0xC2A, 0xC39}, {0xC3D, 0xC3D}, {0xC58, 0xC5A},
    {0xC5D, 0xC5D}, {0xC60, 0xC61}, {0xC80, 0xC80}, {0xC85, 0xC8C}, {0xC8E, 0xC90}, {0xC92, 0xCA8},
    {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBD, 0xCBD}, {0xCDD, 0xCDE}, {0xCE0, 0xCE1}, {0xCF1, 0xCF2},
    {0xD04, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD3D}, {0xD4E, 0xD4E}, {0xD54, 0xD56},
    {0xD5F, 0xD61}, {0xD7A, 0xD7F}, {0xD85, 0xD96}, {0xD9A, 0xDB1}, {0xDB3, 0xDBB}, {0xDBD, 0xDBD},
    {0xDC0, 0xDC6}, {0xE01, 0xE30}, {0xE32, 0xE33}, {0xE40, 0xE46}, {0xE81, 0xE82}, {0xE84, 0xE84},
    {0xE86, 0xE8A}, {0xE8C, 0xEA3}, {0xEA5, 0xEA5}, {0xEA7, 0xEB0}, {0xEB2, 0xEB3}, {0xEBD, 0xEBD},
    {0xEC0, 0xEC4}, {0xEC6, 0xEC6}, {0xEDC, 0xEDF}, {0xF00, 0xF00}, {0xF40, 0xF47}, {0xF49, 0xF6C},
    {0xF88, 0xF8C}, {0x1000, 0x102A}, {0x103F, 0x103F}, {0x1050, 0x1055}, {0x105A, 0x105D}, {0x1061, 0x1061},
    {0x1065, 0x1066}, {0x106E, 0x1070}, {0x1075, 0x1081}, {0x108E, 0x108E}, {0x10A0, 0x10C5}, {0x10C7, 0x10C7},
    {0x10CD, 0x10CD}, {0x10D0, 0x10FA}, {0x10FC, 0x1248}, {0x124A, 0x124D}, {0x1250, 0x1256}, {0x1258, 0x1258},
    {0x125A, 0x125D}, {0x1260, 0x1288}, {0x128A, 0x128D}, {0x1290, 0x12B0}, {0x12B2, 0x12B5}, {0x12B8, 0x12BE},
    {0x12C0, 0x12C0}, {0x12C2, 0x12C5}, {0x12C8, 0x12D6}, {0x12D8, 0x1310}, {0x1312, 0x1315}, {0x1318, 0x135A},
    {0x1380, 0x138F}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1401, 0x166C}, {0x166F, 0x167F}, {0x1681, 0x169A},
    {0x16A0, 0x16EA}, {0x16F1, 0x16F8}, {0x1700, 0x1711}, {0x171F, 0x1731}, {0x1740, 0x1751}, {0x1760, 0x176C},
    {0x176E, 0x1770}, {0x1780, 0x17B3}, {0x17D7, 0x17D7}, {0x17DC, 0x17DC}, {0x1820, 0x1878}, {0x1880, 0x1884},
    {0x1887, 0x18A8}, {0x18AA, 0x18AA}, {0x18B0, 0x18F5}, {0x1900, 0x191E}, {0x1950, 0x196D}, {0x1970, 0x1974},
    {0x1980, 0x19AB}, {0x19B0, 0x19C9}, {0x1A00, 0x1A16}, {0x1A20, 0x1A54}, {0x1AA7, 0x1AA7}, {0x1B05, 0x1B33},
    {0x1B45, 0x1B4C}, {0x1B83, 0x1BA0}, {0x1BAE, 0x1BAF}, {0x1BBA, 0x1BE5}, {0x1C00, 0x1C23}, {0x1C4D, 0x1C4F},
    {0x1C5A, 0x1C7D}, {0x1C80, 0x1C8A}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1CE9, 0x1CEC}, {0x1CEE, 0x1CF3},
    {0x1CF5, 0x1CF6}, {0x1CFA, 0x1CFA}, {0x1D00, 0x1DBF}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D},
    {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2071, 0x2071}, {0x207F, 0x207F},
    {0x2090, 0x209C}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0x2D00, 0x2D25}, {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D}, {0x2D30, 0x2D67}, {0x2D6F, 0x2D6F}, {0x2D80, 0x2D96},
    {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6}, {0x2DB8, 0x2DBE}, {0x2DC0, 0x2DC6}, {0x2DC8, 0x2DCE},
    {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE}, {0x2E2F, 0x2E2F}, {0x3005, 0x3006}, {0x3031, 0x3035}, {0x303B, 0x303C},
    {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E},
    {0x31A0, 0x31BF}, {0x31F0, 0x31FF}, {0x3400, 0x4DBF}, {0x4E00, 0xA48C}, {0xA4D0, 0xA4FD}, {0xA500, 0xA60C},
    {0xA610, 0xA61F}, {0xA62A, 0xA62B}, {0xA640, 0xA66E}, {0xA67F, 0xA69D}, {0xA6A0, 0xA6E5}, {0xA717, 0xA71F},
    {0xA722, 0xA788}, {0xA78B, 0xA7CD}, {0xA7D0, 0xA7D1}, {0xA7D3, 0xA7D3}, {0xA7D5, 0xA7DC}, {0xA7F2, 0xA801},
    {0xA803, 0xA805}, {0xA807, 0xA80A}, {0xA80C, 0xA822}, {0xA840, 0xA873}, {0xA882, 0xA8B3}, {0xA8F2, 0xA8F7},
    {0xA8FB, 0xA8FB}, {0xA8FD, 0xA8FE}, {0xA90A, 0xA925}, {0xA930, 0xA946}, {0xA960, 0xA97C}, {0xA984, 0xA9B2},
    {0xA9CF, 0xA9CF}, {0xA9E0, 0xA9E4}, {0xA9E6, 0xA9EF}, {0xA9FA, 0xA9FE}, {0xAA00, 0xAA28}, {0xAA40, 0xAA42},
    {0xAA44, 0xAA4B}, {0xAA60, 0xAA76}, {0xAA7A, 0xAA7A}, {0xAA7E, 0xAAAF}, {0xAAB1, 0xAAB1}, {0xAAB5, 0xAAB6},
    {0xAAB9, 0xAABD}, {0xAAC0, 0xAAC0}, {0xAAC2, 0xAAC2}, {0xAADB, 0xAADD}, {0xAAE0, 0xAAEA}, {0xAAF2, 0xAAF4},
    {0xAB01, 0xAB06}, {0xAB09, 0xAB0E}, {0xAB11, 0xAB16}, {0xAB20, 0xAB26}, {0xAB28, 0xAB2E}, {0xAB30, 0xAB5A},
    {0xAB5C, 0xAB69}, {0xAB70, 0xABE2}, {0xAC00, 0xD7A3}, {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D},
    {0xFA70, 0xFAD9}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFB1D, 0xFB1D}, {0xFB1F, 0xFB28}, {0xFB2A, 0xFB36},
    {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41}, {0xFB43, 0xFB44}, {0xFB46, 0xFBB1}, {0xFBD3, 0xFD3D},
    {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7}, {0xFDF0, 0xFDFB}, {0xFE70, 0xFE74}, {0xFE76, 0xFEFC}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE}, {0xFFC2, 0xFFC7}, {0xFFCA, 0xFFCF}, {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC},
    {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D},
    {0x10080, 0x100FA}, {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x10300, 0x1031F}, {0x1032D, 0x10340}, {0x10342, 0x10349},
    {0x10350, 0x10375}, {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF}, {0x10400, 0x1049D}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563}, {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592},
    {0x10594, 0x10595}, {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x105C0, 0x105F3},
    {0x10600, 0x10736}, {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855},
    {0x10860, 0x10876}, {0x10880, 0x1089E}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5}, {0x10900, 0x10915}, {0x10920, 0x10939},
    {0x10980, 0x109B7}, {0x109BE, 0x109BF}, {0x10A00, 0x10A00}, {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35},
    {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35}, {0x10B40, 0x10B55},
    {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1}, {0x10EC2, 0x10EC4}, {0x10F00, 0x10F1C},
    {0x10F27, 0x10F27}, {0x10F30, 0x10F45}, {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6}, {0x11003, 0x11037},
    {0x11071, 0x11072}, {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8}, {0x11103, 0x11126}, {0x11144, 0x11144},
    {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111B2}, {0x111C1, 0x111C4}, {0x111DA, 0x111DA},
    {0x111DC, 0x111DC}, {0x11200, 0x11211}, {0x11213, 0x1122B}, {0x1123F, 0x11240}, {0x11280, 0x11286}, {0x11288, 0x11288},
    {0x1128A, 0x1128D}, {0x1128F, 0x1129D}, {0x1129F, 0x112A8}, {0x112B0, 0x112DE}, {0x11305, 0x1130C}, {0x1130F, 0x11310},
    {0x11313, 0x11328}, {0x1132A, 0x11330}, {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350},
    {0x1135D, 0x11361}, {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7},
    {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11400, 0x11434}, {0x11447, 0x1144A}, {0x1145F, 0x11461}, {0x11480, 0x114AF},
    {0x114C4, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F}, {0x11644, 0x11644},
    {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746}, {0x11800, 0x1182B}, {0x118A0, 0x118DF},
    {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916}, {0x11918, 0x1192F}, {0x1193F, 0x1193F},
    {0x11941, 0x11941}, {0x119A0, 0x119A7}, {0x119AA, 0x119D0}, {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00},
    {0x11A0B, 0x11A32}, {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8},
    {0x11BC0, 0x11BE0}, {0x11C00, 0x11C08}, {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06},
    {0x11D08, 0x11D09}, {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68}, {0x11D6A, 0x11D89},
    {0x11D98, 0x11D98}, {0x11EE0, 0x11EF2}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x11FB0, 0x11FB0},
    {0x12000, 0x12399}, {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342F}, {0x13441, 0x13446}, {0x13460, 0x143FA},
    {0x14400, 0x14646}, {0x16100, 0x1611D}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED},
    {0x16B00, 0x16B2F}, {0x16B40, 0x16B43}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F}, {0x16D40, 0x16D6C}, {0x16E40, 0x16E7F},
    {0x16F00, 0x16F4A}, {0x16F50, 0x16F50}, {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE3}, {0x17000, 0x187F7},
    {0x18800, 0x18CD5}, {0x18CFF, 0x18D08}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122},
    {0x1B132, 0x1B132}, {0x1B150, 0x1B152}, {0x1B155, 0x1B155}, {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A},
    {0x1BC70, 0x1BC7C}, {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3},
    {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C}, {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E},
    {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA},
    {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714}, {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788},
    {0x1D78A, 0x1D7A8}, {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D},
    {0x1E100, 0x1E12C}, {0x1E137, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB}, {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE},
    {0x1E800, 0x1E8C4}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B}, {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22},
    {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B},
    {0x1EE42, 0x1EE42}, {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52},
    {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F},
    {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72}, {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C},
    {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B739}, {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D},
    {0x2F800, 0x2FA1D}, {0x30000, 0x3134A}, {0x31350, 0x323AF},
};
static const uint32_t number_ranges[][2] = { // 143 ranges
    {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0x9F4, 0x9F9}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F},
    {0xB72, 0xB77}, {0xBE6, 0xBF2}, {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xCE6, 0xCEF}, {0xD58, 0xD5E},
    {0xD66, 0xD78}, {0xDE6, 0xDEF}, {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF33}, {0x1040, 0x1049},
    {0x1090, 0x1099}, {0x1369, 0x137C}, {0x16EE, 0x16F0}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1810, 0x1819},
    {0x1946, 0x194F}, {0x19D0, 0x19DA}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9},
    {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182},
    {0x2185, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x2CFD, 0x2CFD}, {0x3007, 0x3007},
    {0x3021, 0x3029}, {0x3038, 0x303A}, {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F},
    {0x3280, 0x3289}, {0x32B1, 0x32BF}, {0xA620, 0xA629}, {0xA6E6, 0xA6EF}, {0xA830, 0xA835}, {0xA8D0, 0xA8D9},
    {0xA900, 0xA909}, {0xA9D0, 0xA9D9}, {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19},
    {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B}, {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341},
    {0x1034A, 0x1034A}, {0x103D1, 0x103D5}, {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF},
    {0x108FB, 0x108FF}, {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F}, {0x10BA9, 0x10BAF},
    {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10D40, 0x10D49}, {0x10E60, 0x10E7E}, {0x10F1D, 0x10F26}, {0x10F51, 0x10F54},
    {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x111E1, 0x111F4},
    {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x116D0, 0x116E3},
    {0x11730, 0x1173B}, {0x118E0, 0x118F2}, {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C6C}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59}, {0x11FC0, 0x11FD4}, {0x12400, 0x1246E}, {0x16130, 0x16139}, {0x16A60, 0x16A69},
    {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61}, {0x16D70, 0x16D79}, {0x16E80, 0x16E96}, {0x1CCF0, 0x1CCF9},
    {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}, {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF},
    {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n; // first range with r[k][1] >= cp
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && r[lo][0] <= cp;
}

static int cp_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) - 'a' < 26) return CLS_LETTER;
        if (cp - '0' < 10) return CLS_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CLS_SPACE;
        return CLS_OTHER;
    }
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return CLS_SPACE;
    if (in_ranges(letter_ranges, sizeof letter_ranges / sizeof letter_ranges[0], cp)) return CLS_LETTER;
    if (in_ranges(number_ranges, sizeof number_ranges / sizeof number_ranges[0], cp)) return CLS_NUMBER;
    return CLS_OTHER;
}

// Decodes the code point at s (n > 0 bytes) into *cp and returns its length; an invalid or
// truncated sequence, an overlong form or a surrogate gives *cp = UINT32_MAX and length 1.
static int utf8_decode(const uint8_t* s, size_t n, uint32_t* cp) {
    uint8_t c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    *cp = UINT32_MAX;
    if (len == 0 || (size_t)len > n) return 1;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 1;
        v = (v << 6) | (s[k] & 0x3F);
    }
    if (v < min_cp[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 1;
    *cp = v;
    return len;
}

// class of the character at s[i] (i < n); its length in *len
static int class_at(const uint8_t* s, size_t n, size_t i, int* len) {
    uint32_t cp;
    *len = utf8_decode(s + i, n - i, &cp);
    return cp == UINT32_MAX ? CLS_OTHER : cp_class(cp);
}

// End of the pre-token that starts at s[i] (i < n): the regex's leftmost-first match, by hand.
static size_t pretoken_end(const uint8_t* s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) { // 's 't 'm 'd 're 've 'll, lowercase only, as in GPT-2
        uint8_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    int len;
    int cls = class_at(s, n, i, &len);
    size_t j = i;
    if (s[i] == ' ' && i + 1 < n) { // " ?" : one space joins a following run of letters/numbers/other
        int len2;
        int cls2 = class_at(s, n, i + 1, &len2);
        if (cls2 != CLS_SPACE) {
            cls = cls2;
            j = i + 1;
            len = len2;
        }
    }
    j += len;
    if (cls != CLS_SPACE) { // \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+
        int l;
        while (j < n && class_at(s, n, j, &l) == cls) j += l;
        return j;
    }
    // \s+(?!\S) | \s+ : a whitespace run that ends the text is one pre-token; otherwise its last
    // character is left to start the next one (so " word" keeps its space), unless it is alone.
    size_t last = i;
    int l;
    while (j < n && class_at(s, n, j, &l) == CLS_SPACE) {
        last = j;
        j += l;
    }
    return (j == n || last == i) ? j : last;
}

// ---------------------------------------------------------------------------------------------
// Hash tables: token bytes -> id, and (left id, right id) -> merged id; open addressing.

static uint64_t hash_bytes(const uint8_t* p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ULL; // FNV-1a
    for (size_t k = 0; k < n; k++) h = (h ^ p[k]) * 0x100000001B3ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) { return rng_splitmix64(&x); } // a good 64-bit mixer

static uint64_t table_mask_for(size_t entries) { // load factor at most 1/2
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)entries) cap *= 2;
    return cap - 1;
}

static int piece_lookup(const Tokenizer* tok, const uint8_t* p, size_t n) {
    for (uint64_t h = hash_bytes(p, n) & tok->piece_mask;; h = (h + 1) & tok->piece_mask) {
        int id = tok->piece_slots[h];
        if (id < 0) return -1;
        if (tok->offsets[id + 1] - tok->offsets[id] == n && memcmp(tok->blob + tok->offsets[id], p, n) == 0)
            return id;
    }
}

static int pair_lookup(const Tokenizer* tok, int left, int right) {
    uint64_t key = ((uint64_t)left << 32 | (uint32_t)right) + 1;
    for (uint64_t h = hash_u64(key) & tok->pair_mask;; h = (h + 1) & tok->pair_mask) {
        if (tok->pair_keys[h] == key) return tok->pair_vals[h];
        if (tok->pair_keys[h] == 0) return -1;
    }
}

static void pair_insert(Tokenizer* tok, int left, int right, int merged) {
    uint64_t key = ((uint64_t)left << 32 | (uint32_t)right) + 1;
    uint64_t h = hash_u64(key) & tok->pair_mask;
    while (tok->pair_keys[h] != 0 && tok->pair_keys[h] != key) h = (h + 1) & tok->pair_mask;
    tok->pair_keys[h] = key;
    tok->pair_vals[h] = merged;
}

// ---------------------------------------------------------------------------------------------
// Loading encoder.json and vocab.bpe

// GPT-2's bytes_to_unicode: the printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves, the other 68 bytes in order for U+0100, U+0101, ... u2b (324) is its inverse, -1 where none.
static void gpt2_unicode_to_byte(int16_t u2b[324]) {
    for (int c = 0; c < 324; c++) u2b[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        u2b[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

// A growable byte string.
typedef struct {
    uint8_t* p;
    size_t n, cap;
} Bytes;

static void bytes_push(Bytes* b, uint8_t c) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1 << 16;
        uint8_t* p = malloc_check(cap);
        if (b->n) memcpy(p, b->p, b->n);
        free(b->p);
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = c;
}

// Appends the byte that GPT-2's alphabet character cp stands for; -1 if it stands for none.
static int push_gpt2_char(Bytes* out, const int16_t u2b[324], uint32_t cp) {
    if (cp >= 324 || u2b[cp] < 0) return -1;
    bytes_push(out, (uint8_t)u2b[cp]);
    return 0;
}

// Reads the JSON string at s[*i] (at its opening quote) and appends the bytes its characters stand
// for in GPT-2's alphabet. Returns 0, or -1 with a message.
static int json_token_string(const uint8_t* s, size_t n, size_t* i, const int16_t u2b[324], Bytes* out,
                             const char* path, char* err, size_t errlen) {
    size_t k = *i;
    if (k >= n || s[k] != '"') return td_error(err, errlen, "%s: malformed JSON at byte %zu: expected a string", path, k);
    k++;
    while (k < n && s[k] != '"') {
        uint32_t cp;
        size_t at = k;
        if (s[k] == '\\') {
            if (k + 1 >= n) break;
            char e = (char)s[k + 1];
            k += 2;
            const char* simple = strchr("\"\\/bfnrt", e);
            if (e != 0 && simple) {
                cp = (uint32_t)"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else if (e == 'u') {
                uint32_t units[2] = {0, 0};
                int nunits = 1;
                for (int u = 0; u < nunits; u++) {
                    if (u == 1 && !(k + 1 < n && s[k] == '\\' && s[k + 1] == 'u'))
                        return td_error(err, errlen, "%s: malformed JSON at byte %zu: unpaired surrogate", path, at);
                    if (u == 1) k += 2;
                    if (k + 4 > n)
                        return td_error(err, errlen, "%s: malformed JSON at byte %zu: truncated \\u escape", path, at);
                    for (int d = 0; d < 4; d++, k++) {
                        int c = s[k], v = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
                        if (v < 0) return td_error(err, errlen, "%s: malformed JSON at byte %zu: bad \\u escape", path, at);
                        units[u] = units[u] << 4 | (uint32_t)v;
                    }
                    if (u == 0 && units[0] >= 0xD800 && units[0] <= 0xDBFF) nunits = 2;
                }
                if (nunits == 2 && !(units[1] >= 0xDC00 && units[1] <= 0xDFFF))
                    return td_error(err, errlen, "%s: malformed JSON at byte %zu: unpaired surrogate", path, at);
                cp = nunits == 2 ? 0x10000 + ((units[0] - 0xD800) << 10) + (units[1] - 0xDC00) : units[0];
            } else {
                return td_error(err, errlen, "%s: malformed JSON at byte %zu: unknown escape", path, at);
            }
        } else if (s[k] < 0x20) {
            return td_error(err, errlen, "%s: malformed JSON at byte %zu: control character in a string", path, at);
        } else {
            k += (size_t)utf8_decode(s + k, n - k, &cp);
            if (cp == UINT32_MAX) return td_error(err, errlen, "%s: byte %zu is not valid UTF-8", path, at);
        }
        if (push_gpt2_char(out, u2b, cp) != 0)
            return td_error(err, errlen, "%s: byte %zu: character U+%04X is outside GPT-2's byte alphabet", path, at, cp);
    }
    if (k >= n) return td_error(err, errlen, "%s: malformed JSON: unterminated string at byte %zu", path, *i);
    *i = k + 1;
    return 0;
}

static size_t skip_ws(const uint8_t* s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static const char EOT_TEXT[] = "<|endoftext|>";

// encoder.json: a flat object of token string -> id. Fills blob, offsets, vocab_size, eot.
static int load_encoder(Tokenizer* tok, const char* path, const int16_t u2b[324], char* err, size_t errlen) {
    size_t n;
    uint8_t* s = td_read_file(path, "tokenizer file", &n, err, errlen);
    if (!s) return -1;
    Bytes keys = {0};    // all keys' bytes, in file order
    Bytes entries = {0}; // per key: (int32 id, uint32 start in keys), packed
    int rc = -1, count = 0, max_id = -1;
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{') {
        td_error(err, errlen, "%s: malformed JSON at byte %zu: expected '{'", path, i);
        goto done;
    }
    i = skip_ws(s, n, i + 1);
    while (i < n && s[i] != '}') {
        uint32_t start = (uint32_t)keys.n;
        if (json_token_string(s, n, &i, u2b, &keys, path, err, errlen) != 0) goto done;
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != ':') {
            td_error(err, errlen, "%s: malformed JSON at byte %zu: expected ':'", path, i);
            goto done;
        }
        i = skip_ws(s, n, i + 1);
        long long id = 0;
        size_t digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9' && id < (1LL << 30)) id = id * 10 + (s[i++] - '0'), digits++;
        if (digits == 0 || id >= 65536 || (i < n && s[i] >= '0' && s[i] <= '9')) {
            td_error(err, errlen, "%s: byte %zu: expected a token id in [0, 65535]", path, i);
            goto done;
        }
        uint32_t rec[2] = {(uint32_t)id, start};
        for (size_t b = 0; b < sizeof rec; b++) bytes_push(&entries, ((const uint8_t*)rec)[b]);
        count++;
        if (id > max_id) max_id = (int)id;
        i = skip_ws(s, n, i);
        if (i < n && s[i] == ',') {
            i = skip_ws(s, n, i + 1);
            if (i < n && s[i] == '}') {
                td_error(err, errlen, "%s: malformed JSON at byte %zu: a comma before '}'", path, i);
                goto done;
            }
        } else if (i >= n || s[i] != '}') {
            td_error(err, errlen, "%s: malformed JSON at byte %zu: expected ',' or '}'", path, i);
            goto done;
        }
    }
    if (i >= n || s[i] != '}' || skip_ws(s, n, i + 1) != n) {
        td_error(err, errlen, "%s: malformed JSON at byte %zu: expected the object to end there", path, i);
        goto done;
    }
    if (count < 256 || max_id != count - 1) {
        td_error(err, errlen, "%s: %d tokens with ids up to %d: ids must be 0..N-1 with N >= 256", path, count, max_id);
        goto done;
    }
    // lay the tokens out by id
    tok->vocab_size = count;
    tok->offsets = calloc_check((size_t)count + 1, sizeof(uint32_t));
    tok->blob = malloc_check(keys.n);
    int32_t* start_of = malloc_check((size_t)count * sizeof(int32_t));
    int32_t* len_of = malloc_check((size_t)count * sizeof(int32_t));
    for (int t = 0; t < count; t++) len_of[t] = -1;
    for (int e = 0; e < count; e++) {
        uint32_t rec[2], next[2] = {0, (uint32_t)keys.n}; // (id, start of its key) of this and the next entry
        memcpy(rec, entries.p + 8 * (size_t)e, sizeof rec);
        if (e + 1 < count) memcpy(next, entries.p + 8 * (size_t)(e + 1), sizeof next);
        if (len_of[rec[0]] >= 0) {
            td_error(err, errlen, "%s: id %u is given to two tokens", path, rec[0]);
            free(start_of);
            free(len_of);
            goto done;
        }
        start_of[rec[0]] = (int32_t)rec[1];
        len_of[rec[0]] = (int32_t)(next[1] - rec[1]);
    }
    for (int t = 0; t < count; t++) {
        memcpy(tok->blob + tok->offsets[t], keys.p + start_of[t], (size_t)len_of[t]);
        tok->offsets[t + 1] = tok->offsets[t] + (uint32_t)len_of[t];
    }
    free(start_of);
    free(len_of);
    rc = 0;
done:
    free(keys.p);
    free(entries.p);
    free(s);
    return rc;
}

// Tables from the loaded tokens: bytes -> id (all but <|endoftext|>), single-byte ids.
static int build_piece_table(Tokenizer* tok, const char* path, char* err, size_t errlen) {
    tok->piece_mask = table_mask_for((size_t)tok->vocab_size);
    tok->piece_slots = malloc_check((tok->piece_mask + 1) * sizeof(int32_t));
    memset(tok->piece_slots, 0xFF, (tok->piece_mask + 1) * sizeof(int32_t));
    for (int b = 0; b < 256; b++) tok->byte_token[b] = -1;
    tok->eot = -1;
    for (int t = 0; t < tok->vocab_size; t++) {
        const uint8_t* p = tok->blob + tok->offsets[t];
        size_t n = tok->offsets[t + 1] - tok->offsets[t];
        if (n == sizeof EOT_TEXT - 1 && memcmp(p, EOT_TEXT, n) == 0) {
            tok->eot = t; // special: never produced by merges or by ordinary text
            continue;
        }
        if (n == 0) return td_error(err, errlen, "%s: token %d is the empty string", path, t);
        if (piece_lookup(tok, p, n) >= 0) return td_error(err, errlen, "%s: token %d repeats an earlier token", path, t);
        uint64_t h = hash_bytes(p, n) & tok->piece_mask;
        while (tok->piece_slots[h] >= 0) h = (h + 1) & tok->piece_mask;
        tok->piece_slots[h] = t;
        if (n == 1) tok->byte_token[p[0]] = t;
    }
    for (int b = 0; b < 256; b++)
        if (tok->byte_token[b] < 0) return td_error(err, errlen, "%s: no token for the single byte 0x%02X", path, b);
    return 0;
}

// vocab.bpe: "#version" line, then one merge "left right" per line, highest priority first.
// A token's rank is the line that makes it (tiktoken ranks tokens the same way).
static int load_merges(Tokenizer* tok, const char* path, const int16_t u2b[324], char* err, size_t errlen) {
    size_t n;
    uint8_t* s = td_read_file(path, "tokenizer file", &n, err, errlen);
    if (!s) return -1;
    tok->rank = malloc_check((size_t)tok->vocab_size * sizeof(int32_t));
    for (int t = 0; t < tok->vocab_size; t++) tok->rank[t] = INT32_MAX;
    Bytes word = {0};
    int rc = -1, line = 0, merges = 0;
    for (size_t i = 0; i < n; line++) {
        size_t end = i;
        while (end < n && s[end] != '\n') end++;
        size_t stop = end > i && s[end - 1] == '\r' ? end - 1 : end;
        if (stop > i && !(line == 0 && s[i] == '#')) {
            // both halves, decoded to bytes, one after the other in word; split at the one space
            word.n = 0;
            size_t split = 0;
            int spaces = 0;
            for (size_t k = i; k < stop;) {
                uint32_t cp;
                size_t at = k;
                k += (size_t)utf8_decode(s + k, stop - k, &cp);
                if (cp == ' ') {
                    spaces++;
                    split = word.n;
                } else if (cp == UINT32_MAX || push_gpt2_char(&word, u2b, cp) != 0) {
                    td_error(err, errlen, "%s: line %d, byte %zu: a character outside GPT-2's byte alphabet", path, line + 1,
                         at);
                    goto done;
                }
            }
            if (spaces != 1 || split == 0 || split == word.n) {
                td_error(err, errlen, "%s: line %d: expected two tokens separated by one space", path, line + 1);
                goto done;
            }
            int left = piece_lookup(tok, word.p, split), right = piece_lookup(tok, word.p + split, word.n - split);
            int merged = piece_lookup(tok, word.p, word.n);
            if (left < 0 || right < 0 || merged < 0) {
                td_error(err, errlen, "%s: line %d: the merge of tokens not in the encoder (or making one not in it)", path,
                     line + 1);
                goto done;
            }
            if (tok->rank[merged] == INT32_MAX) tok->rank[merged] = merges;
            merges++;
        }
        i = end + 1;
    }
    rc = 0;
done:
    free(word.p);
    free(s);
    return rc;
}

// Pairs (left, right) whose bytes together are a ranked token t: tiktoken merges any two adjacent
// parts whose concatenation is a ranked token, whichever merge line made it. Counts them, and
// inserts them when the table exists.
static size_t visit_pairs(Tokenizer* tok) {
    size_t count = 0;
    for (int t = 0; t < tok->vocab_size; t++) {
        if (tok->rank[t] == INT32_MAX) continue;
        const uint8_t* p = tok->blob + tok->offsets[t];
        size_t n = tok->offsets[t + 1] - tok->offsets[t];
        for (size_t k = 1; k < n; k++) {
            int left = piece_lookup(tok, p, k), right = piece_lookup(tok, p + k, n - k);
            if (left < 0 || right < 0) continue;
            count++;
            if (tok->pair_keys) pair_insert(tok, left, right, t);
        }
    }
    return count;
}

int tokenizer_init_gpt2(Tokenizer* tok, const char* encoder_json_path, const char* vocab_bpe_path, char* err,
                        size_t errlen) {
    memset(tok, 0, sizeof *tok);
    tok->kind = SHARD_TOKENIZER_GPT2;
    int16_t u2b[324];
    gpt2_unicode_to_byte(u2b);
    if (load_encoder(tok, encoder_json_path, u2b, err, errlen) != 0 ||
        build_piece_table(tok, encoder_json_path, err, errlen) != 0 ||
        load_merges(tok, vocab_bpe_path, u2b, err, errlen) != 0) {
        tokenizer_free(tok);
        return -1;
    }
    tok->pair_mask = table_mask_for(visit_pairs(tok));
    tok->pair_keys = calloc_check(tok->pair_mask + 1, sizeof(uint64_t));
    tok->pair_vals = malloc_check((tok->pair_mask + 1) * sizeof(int32_t));
    visit_pairs(tok);
    return 0;
}

int tokenizer_init_bytes(Tokenizer* tok) {
    memset(tok, 0, sizeof *tok);
    tok->kind = SHARD_TOKENIZER_BYTES;
    tok->vocab_size = 256;
    tok->eot = -1;
    tok->blob = malloc_check(256);
    tok->offsets = malloc_check(257 * sizeof(uint32_t));
    for (int b = 0; b < 256; b++) {
        tok->blob[b] = (uint8_t)b;
        tok->offsets[b] = (uint32_t)b;
        tok->byte_token[b] = b;
    }
    tok->offsets[256] = 256;
    return 0;
}

void tokenizer_free(Tokenizer* tok) {
    free(tok->blob);
    free(tok->offsets);
    free(tok->rank);
    free(tok->piece_slots);
    free(tok->pair_keys);
    free(tok->pair_vals);
    memset(tok, 0, sizeof *tok);
}

// ---------------------------------------------------------------------------------------------
// Encoding

// Scratch for BPE over one pre-token of up to cap bytes: a linked list of parts (part i starts at
// byte i, so index order is text order) and a binary min-heap of candidate merges.
typedef struct {
    size_t cap;
    int32_t* id;   // (cap) token of the part starting at byte i
    int32_t* next; // (cap) next part, -1 at the end
    int32_t* prev; // (cap) previous part, -1 at the start
    uint32_t* ver; // (cap) bumped whenever part i changes or dies, invalidating heap entries
    struct Merge {
        uint64_t key; // rank << 32 | left part: lowest rank first, then leftmost, as tiktoken
        uint32_t left_ver, right_ver;
    } * heap;      // (3*cap) at most cap-1 initial candidates plus 2 per merge
    size_t heap_n;
    // output
    int* out;      // (out_cap)
    size_t out_cap, out_n;
} Bpe;

static void bpe_reserve(Bpe* b, size_t n) {
    if (n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < n) cap *= 2;
    free(b->id);
    free(b->next);
    free(b->prev);
    free(b->ver);
    free(b->heap);
    b->cap = cap;
    b->id = malloc_check(cap * sizeof(int32_t));
    b->next = malloc_check(cap * sizeof(int32_t));
    b->prev = malloc_check(cap * sizeof(int32_t));
    b->ver = malloc_check(cap * sizeof(uint32_t));
    b->heap = malloc_check(3 * cap * sizeof(struct Merge));
}

static void emit(Bpe* b, int id) {
    if (b->out_n < b->out_cap) b->out[b->out_n] = id;
    b->out_n++;
}

// Pushes the merge of part l with its next part, if their bytes together are a ranked token.
static void heap_push_pair(const Tokenizer* tok, Bpe* b, int l) {
    if (l < 0 || b->next[l] < 0) return;
    int r = b->next[l];
    int merged = pair_lookup(tok, b->id[l], b->id[r]);
    if (merged < 0) return;
    struct Merge m = {(uint64_t)tok->rank[merged] << 32 | (uint32_t)l, b->ver[l], b->ver[r]};
    size_t k = b->heap_n++;
    while (k > 0 && b->heap[(k - 1) / 2].key > m.key) {
        b->heap[k] = b->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    b->heap[k] = m;
}

static struct Merge heap_pop(Bpe* b) {
    struct Merge top = b->heap[0], last = b->heap[--b->heap_n];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= b->heap_n) break;
        if (c + 1 < b->heap_n && b->heap[c + 1].key < b->heap[c].key) c++;
        if (b->heap[c].key >= last.key) break;
        b->heap[k] = b->heap[c];
        k = c;
    }
    if (b->heap_n > 0) b->heap[k] = last;
    return top;
}

// BPE of one pre-token p (n bytes): repeatedly merge the adjacent pair whose merged token has the
// lowest rank, the leftmost on ties. O(n log n) per pre-token through the heap.
static void bpe_piece(const Tokenizer* tok, Bpe* b, const uint8_t* p, size_t n) {
    int whole = n > 1 ? piece_lookup(tok, p, n) : tok->byte_token[p[0]];
    if (whole >= 0) { // tiktoken takes a pre-token that is itself a token as is
        emit(b, whole);
        return;
    }
    bpe_reserve(b, n);
    for (size_t i = 0; i < n; i++) {
        b->id[i] = tok->byte_token[p[i]];
        b->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        b->prev[i] = (int32_t)i - 1;
        b->ver[i] = 0;
    }
    b->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) heap_push_pair(tok, b, (int)i);
    while (b->heap_n > 0) {
        struct Merge m = heap_pop(b);
        int l = (int)(uint32_t)m.key, r = b->next[l];
        if (b->ver[l] != m.left_ver || r < 0 || b->ver[r] != m.right_ver) continue; // stale
        b->id[l] = pair_lookup(tok, b->id[l], b->id[r]);
        b->ver[l]++;
        b->ver[r]++;
        b->next[l] = b->next[r];
        if (b->next[r] >= 0) b->prev[b->next[r]] = l;
        heap_push_pair(tok, b, b->prev[l]);
        heap_push_pair(tok, b, l);
    }
    for (int i = 0; i >= 0; i = b->next[i]) emit(b, b->id[i]);
}

size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int allow_special, int* ids_out,
                        size_t cap) {
    const uint8_t* s = (const uint8_t*)text;
    if (tok->kind == SHARD_TOKENIZER_BYTES) {
        for (size_t i = 0; i < len && i < cap; i++) ids_out[i] = s[i];
        return len;
    }
    Bpe b = {0};
    b.out = ids_out;
    b.out_cap = cap;
    size_t i = 0;
    while (i < len) {
        // ordinary text up to the next special token (tiktoken splits there first)
        const uint8_t* special = NULL;
        if (allow_special && tok->eot >= 0) special = memmem(s + i, len - i, EOT_TEXT, sizeof EOT_TEXT - 1);
        size_t end = special ? (size_t)(special - s) : len;
        while (i < end) {
            size_t j = pretoken_end(s, end, i);
            bpe_piece(tok, &b, s + i, j - i);
            i = j;
        }
        if (special) {
            emit(&b, tok->eot);
            i += sizeof EOT_TEXT - 1;
        }
    }
    free(b.id);
    free(b.next);
    free(b.prev);
    free(b.ver);
    free(b.heap);
    return b.out_n;
}

const uint8_t* tokenizer_decode(const Tokenizer* tok, int id, size_t* len) {
    if (id < 0 || id >= tok->vocab_size) {
        *len = 0;
        return NULL;
    }
    *len = tok->offsets[id + 1] - tok->offsets[id];
    return tok->blob + tok->offsets[id];
}

int tokenizer_vocab_size(const Tokenizer* tok) { return tok->vocab_size; }
int tokenizer_eot(const Tokenizer* tok) { return tok->eot; }
