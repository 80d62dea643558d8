"""The networks bench/train_network.py trains, as a PyTorch user writes them (nothing pyooc in
them): a 3D U-Net (conv-BN-ReLU pairs, max pooling, transposed-convolution upsampling, skips joined
with torch.cat) and a VGG-16-like 2D net (13 3x3 convolutions with batch norm, five max pools, a
linear classifier). The caller passes torch in, so importing this needs no torch."""


def unet3d(torch, *, channels=1, base=16, levels=3):
    nn = torch.nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU(),
                             nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU())

    class UNet3D(nn.Module):
        def __init__(self):
            super().__init__()
            widths = [base * 2**i for i in range(levels + 1)]
            self.down = nn.ModuleList(block(cin, cout) for cin, cout in zip([channels] + widths[:-2], widths[:-1]))
            self.pool = nn.MaxPool3d(2)
            self.bottom = block(widths[-2], widths[-1])
            self.up = nn.ModuleList(nn.ConvTranspose3d(w * 2, w, 2, stride=2) for w in reversed(widths[:-1]))
            self.merge = nn.ModuleList(block(w * 2, w) for w in reversed(widths[:-1]))
            self.head = nn.Conv3d(base, channels, 1)

        def forward(self, x):
            skips = []
            for down in self.down:
                x = down(x)
                skips.append(x)
                x = self.pool(x)
            x = self.bottom(x)
            for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
                x = merge(torch.cat([up(x), skip], 1))
            return self.head(x)

    return UNet3D()


VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16(torch, *, channels=3, classes=10, width=1.0, side=224):
    """VGG-16's convolutions (widths scaled by `width`) with batch norm, for side x side images."""
    nn = torch.nn
    layers, cin = [], channels
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            cout = max(1, int(v * width))
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(cin * (side // 32) ** 2, classes))


def saved_activation_bytes(torch, model, x):
    """What autograd saves for one training step of model on x (each tensor counted once): the
    activations a budget must hold, measured on the meta device (no memory, no compute)."""
    import copy
    meta = copy.deepcopy(model).to("meta")
    seen, total = set(), [0]

    def pack(t):
        key = id(t)
        if key not in seen:
            seen.add(key)
            total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        meta(x.to("meta"))
    return total[0]
