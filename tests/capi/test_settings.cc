// Settings as objects: the keys the model lists for -object hv-disk-model, hv-vm-caps and
// hv-fault, the check of their text, a disk model shared by disks, and the QAPI schema patch
// that lets QEMU's -object take these types listing exactly those keys.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hvstor/capi.h"

namespace {

struct Key {
    std::string name, meaning;
};

std::vector<Key> keys(const char* kind) {
    char* text = hvstor_settings_keys(kind);
    std::vector<Key> out;
    if (!text) return out;
    std::istringstream in(text);
    std::free(text);
    for (std::string line; std::getline(in, line);) {
        const size_t tab = line.find('\t');
        if (tab != std::string::npos) out.push_back({line.substr(0, tab), line.substr(tab + 1)});
    }
    return out;
}

std::string check(const char* kind, const char* text) {
    char* err = nullptr;
    if (hvstor_settings_check(kind, text, &err)) return "ok";
    std::string e = err ? err : "(no message)";
    std::free(err);
    return e;
}

TEST(Settings, EachKindListsItsKeysWithMeanings) {
    const auto model = keys("disk-model"), vm = keys("vm-caps"), fault = keys("fault");
    ASSERT_GT(model.size(), vm.size());
    ASSERT_EQ(fault.size(), 14u);
    std::map<std::string, int> in_model;
    for (const Key& k : model) {
        EXPECT_FALSE(k.meaning.empty()) << k.name;
        in_model[k.name]++;
    }
    for (const Key& k : vm) EXPECT_EQ(in_model[k.name], 1) << k.name << ": a VM key the disk model lacks";
    EXPECT_EQ(model.front().name, "profile");
    EXPECT_NE(model.front().meaning.find("premium-p10"), std::string::npos) << model.front().meaning;
    EXPECT_EQ(hvstor_settings_keys("tape"), nullptr);
}

TEST(Settings, CheckNamesTheBadSetting) {
    EXPECT_EQ(check("disk-model", "profile=premium-p10,burst=off"), "ok");
    EXPECT_NE(check("disk-model", "iops=lots").find("iops=lots"), std::string::npos);
    EXPECT_EQ(check("vm-caps", "profile=Standard_D16s_v3"), "ok");
    EXPECT_NE(check("vm-caps", "max-outstanding=4").find("max-outstanding"), std::string::npos);
    EXPECT_EQ(check("fault", "error=medium,ops=read,lba=0-99"), "ok");
    EXPECT_NE(check("fault", "error=fire").find("error=fire"), std::string::npos);
    EXPECT_NE(check("tape", "x=1").find("want disk-model, vm-caps or fault"), std::string::npos);
}

TEST(Settings, ModelObjectRefusesBadSettingsAndFreesNull) {
    char* err = nullptr;
    EXPECT_EQ(hvstor_disk_model_new("iops=lots", &err), nullptr);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(err).find("iops=lots"), std::string::npos) << err;
    std::free(err);
    for (const char* own : {"iops=100,timeline=/tmp/t.jsonl", "name=x"}) {
        EXPECT_EQ(hvstor_disk_model_new(own, &err), nullptr) << own;
        ASSERT_NE(err, nullptr);
        EXPECT_NE(std::string(err).find("a disk's own"), std::string::npos) << err;
        std::free(err);
        err = nullptr;
    }
    HvstorDiskModel* m = hvstor_disk_model_new("profile=premium-p10", &err);
    ASSERT_NE(m, nullptr);
    EXPECT_FALSE(hvstor_disk_model_in_use(m));
    hvstor_disk_model_free(m);
    hvstor_disk_model_free(nullptr);
}

// The schema patch's struct for `type` lists each key of `kind` ('.' as '-') as an optional
// string, documented, and nothing else: QEMU refuses an -object member the schema lacks,
// and a schema member the model lacks would be refused at the object's creation.
void expect_schema(const std::string& patch, const std::string& type, const char* kind, const std::string& qom) {
    const size_t at = patch.find("+{ 'struct': '" + type + "',");
    ASSERT_NE(at, std::string::npos) << type << " missing from the schema patch";
    const std::string body = patch.substr(at, patch.find("} }", at) - at);
    size_t members = 0;
    for (size_t p = 0; (p = body.find("'*", p)) != std::string::npos; p++) members++;
    const auto ks = keys(kind);
    EXPECT_EQ(members, ks.size()) << type << ": the schema and the model list different settings";
    for (Key k : ks) {
        for (char& c : k.name)
            if (c == '.') c = '-';
        EXPECT_NE(body.find("'*" + k.name + "': 'str'"), std::string::npos) << type << " lacks " << k.name;
        EXPECT_NE(patch.find("+# @" + k.name + ":"), std::string::npos) << type << ": " << k.name << " undocumented";
    }
    EXPECT_NE(patch.find("+    '" + qom + "',\n"), std::string::npos) << qom << " is not an ObjectType";
    EXPECT_NE(patch.find("+      '" + qom + "':"), std::string::npos) << qom << " is not a branch of ObjectOptions";
}

TEST(Settings, QapiSchemaPatchListsExactlyTheModelsKeys) {
    std::ifstream f(HVSTOR_QAPI_PATCH);
    ASSERT_TRUE(f) << "cannot read " << HVSTOR_QAPI_PATCH;
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string patch = ss.str();
    expect_schema(patch, "HvDiskModelProperties", "disk-model", "hv-disk-model");
    expect_schema(patch, "HvVmCapsProperties", "vm-caps", "hv-vm-caps");
    expect_schema(patch, "HvFaultProperties", "fault", "hv-fault");
}

} // namespace
