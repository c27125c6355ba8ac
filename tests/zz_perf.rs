use netcl::{Device, Tensor, ops};
#[test]
#[ignore]
fn perf() {
    let dev = Device::select(Some("auto")).unwrap();
    let (c, h) : (usize, usize) = if std::env::var("BIG").is_ok() { (64, 56) } else { (256, 14) };
    let x = Tensor::randn(&dev, &[8, c, h, h], 0.0, 1.0, 1).unwrap();
    let w = Tensor::randn(&dev, &[c, c, 3, 3], 0.0, 0.1, 2).unwrap();
    let o = ops::Conv2dOptions::new().padding(1);
    let go = Tensor::randn(&dev, &[8, c, h, h], 0.0, 1.0, 3).unwrap();
    for _ in 0..2 { let _ = ops::conv2d_backward(&x, &w, &go, false, true, &o).unwrap(); }
    dev.synchronize().unwrap();
    dev.record_launches(true);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let _c = ops::conv2d_backward(&x, &w, &go, false, true, &o).unwrap();
        dev.synchronize().unwrap();
        let l = dev.take_launches().unwrap();
        eprintln!("wall {:.2} ms  {:?}", t.elapsed().as_secs_f64()*1e3, l.iter().map(|x| (x.kernel.clone(), (x.ms*100.0).round()/100.0)).collect::<Vec<_>>());
    }
}
